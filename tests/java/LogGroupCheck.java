package streamdb.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Prints LogGroup.of's tasks for the partitions given as arguments, `relation:partition:start:end`
 * each (tests/test_log_groups.py): one line per task, its partitions separated by spaces.
 */
public final class LogGroupCheck {
  public static void main(String[] args) {
    List<LogPartition> parts = new ArrayList<>();
    for (String a : args) {
      String[] f = a.split(":");
      parts.add(new LogPartition(Integer.parseInt(f[0]), Integer.parseInt(f[1]), Long.parseLong(f[2]),
          Long.parseLong(f[3]), null));
    }
    for (InputPartition task : LogGroup.of(parts)) {
      LogPartition[] members = task instanceof LogGroup ? ((LogGroup) task).parts : new LogPartition[] {(LogPartition) task};
      StringBuilder line = new StringBuilder(task instanceof LogGroup ? "group" : "single");
      for (LogPartition p : members) {
        line.append(' ').append(p.relation).append(':').append(p.partition).append(':').append(p.start)
            .append(':').append(p.end);
      }
      System.out.println(line);
    }
  }
}
