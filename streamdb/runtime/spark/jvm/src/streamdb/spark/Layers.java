package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.execution.streaming.state.RocksDBConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.LongAccumulator;

/** Entry points called from Python (py4j): one stateful layer over a stream of change records. */
public final class Layers {
  /** A change record between layers; see Rec. */
  public static final StructType RECORD = new StructType()
      .add("op", DataTypes.IntegerType, false)
      .add("side", DataTypes.IntegerType, true)
      .add("k", DataTypes.StringType, true)
      .add("row", DataTypes.StringType, true)
      .add("row2", DataTypes.StringType, true)
      .add("a", DataTypes.createArrayType(DataTypes.StringType, true), true)
      .add("w", DataTypes.LongType, false);

  static final StructType KEY = new StructType()
      .add("op", DataTypes.IntegerType, false)
      .add("k", DataTypes.StringType, true);

  private static final ObjectMapper JSON = new ObjectMapper();

  private Layers() {}

  /**
   * `frame.selectExpr(exprs)` for a JSON array of SQL expressions ("*", "e AS `n`"): one call from
   * Python, where building each expression as a Column costs ~6 py4j round trips.
   */
  public static Dataset<Row> select(Dataset<Row> frame, String exprsJson) {
    JsonNode node;
    try {
      node = JSON.readTree(exprsJson);
    } catch (Exception e) {
      throw new IllegalArgumentException("bad expression list " + exprsJson, e);
    }
    String[] exprs = new String[node.size()];
    for (int i = 0; i < exprs.length; i++) {
      exprs[i] = node.get(i).asText();
    }
    return frame.selectExpr(exprs);
  }

  /**
   * The layer's output changes: `records` (in RECORD's columns) through the operators of `spec`;
   * `stateRows` sums the entries the layer adds to its state store minus those it removes.
   * `clock` (non-null for a pipeline with temporal filters): the operators see the micro-batch's
   * processing time and may set timers on it, counted there (Ticks).
   */
  public static Dataset<Row> layer(Dataset<Row> records, String spec, LongAccumulator stateRows,
                                   ClockCounts clock) {
    Spec.parse(spec);  // a bad spec fails here, on the driver, not in a task
    Dataset<Row> input = records.select("op", "side", "k", "row", "row2", "a", "w")
        .mapPartitions((MapPartitionsFunction<Row, Row>) rows -> new Combiner(rows, Spec.parse(spec)),
                       Encoders.row(RECORD));
    // Grouped by columns, not by a key function: a function's key (AppendColumnsWithObject)
    // decodes every record into a Row and generates its projections again in every task.
    return input
        .groupBy(input.col("op"), functions.coalesce(input.col("k"), functions.lit("")).as("k"))
        .as(Encoders.row(KEY), Encoders.row(RECORD))
        .transformWithState(new DeltaProcessor(spec, stateRows, clock, blockCache(records)),
                            clock != null ? TimeMode.ProcessingTime() : TimeMode.None(),
                            OutputMode.Append(), Encoders.row(RECORD));
  }

  /** The state store's memory settings as Spark reads them (RocksDBConf), from the session. */
  private static BlockCache.Settings blockCache(Dataset<Row> records) {
    RocksDBConf conf = RocksDBConf.apply(new StateStoreConf(records.sparkSession().sessionState().conf(),
                                                            scala.collection.immutable.Map$.MODULE$.empty()));
    return new BlockCache.Settings(conf.boundedMemoryUsage(), conf.totalMemoryUsageMB(), conf.writeBufferCacheRatio(),
                                   conf.highPriorityPoolRatio());
  }

  public static String recordSchemaJson() {
    return RECORD.json();
  }
}
