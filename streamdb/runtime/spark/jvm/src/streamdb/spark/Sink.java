package streamdb.spark;

import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;

/**
 * The micro-batch's rows the server commits, served to Python as Arrow in one call. Every call
 * from Python into the JVM is a round trip between two processes that, on a loaded machine,
 * each wait for a core: ~5 ms apiece measured at 10,000 events/s on 2 cores. PySpark's
 * where/select/toArrow made ~40 of them per batch; this makes two.
 */
public final class Sink {
  private static final ConcurrentHashMap<String, Object> SERVERS = new ConcurrentHashMap<>();

  private Sink() {}

  /**
   * Starts serving the rows of {@code batch} matching {@code condition}, with the columns named
   * one per line in {@code columns}, as PySpark's toArrow does. Returns "port\nsecret"; the
   * reader then calls {@link #finish} with the port.
   */
  public static String serve(Dataset<Row> batch, String condition, String columns) {
    String[] names = columns.split("\n", -1);
    Column[] cols = new Column[names.length];
    for (int i = 0; i < names.length; i++) {
      cols[i] = functions.col("`" + names[i].replace("`", "``") + "`");
    }
    Dataset<Row> rows = batch.where(condition).select(cols);
    Object[] served = ((org.apache.spark.sql.classic.Dataset<Row>) rows).collectAsArrowToPython();
    String port = String.valueOf(served[0]);
    SERVERS.put(port, served[2]);
    return port + "\n" + served[1];
  }

  /** Waits for the serving thread and throws what the collection threw, if anything. */
  public static void finish(String port) {
    Object server = SERVERS.remove(port);
    if (server != null) {
      ((org.apache.spark.security.SocketAuthServer<?>) server).getResult();
    }
  }
}
