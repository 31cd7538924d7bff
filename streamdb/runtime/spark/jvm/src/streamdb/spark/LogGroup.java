package streamdb.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * Several small LogPartitions read by one task, in (relation, partition, start) order.
 *
 * <p>Every task of a micro-batch deserializes the stage's whole plan (for a pipeline of many views,
 * 0.3-1 MB of serialized Catalyst trees and generated code), whatever it reads: a batch of a few
 * thousand changes spread over several relations paid that once per relation.
 */
final class LogGroup implements InputPartition {
  private static final long serialVersionUID = 1L;
  // Changes one task reads before a batch's small partitions are given more tasks.
  static final long TASK_ROWS = 16_384;
  final LogPartition[] parts;

  LogGroup(LogPartition[] parts) {
    this.parts = parts;
  }

  static long rows(LogPartition p) {
    return p.end - p.start;
  }

  /**
   * The partitions as ceil(rows / TASK_ROWS) tasks (never more than there are partitions), each
   * taking the largest remaining partition in turn onto the task with the fewest rows. With as
   * many tasks as partitions (a backfill's full chunks) the partitions are returned as they are.
   */
  static InputPartition[] of(List<LogPartition> parts) {
    long total = 0;
    for (LogPartition p : parts) {
      total += rows(p);
    }
    int tasks = (int) Math.min(parts.size(), Math.max(1, (total + TASK_ROWS - 1) / TASK_ROWS));
    if (tasks >= parts.size()) {
      return parts.toArray(new InputPartition[0]);
    }
    List<LogPartition> bySize = new ArrayList<>(parts);
    bySize.sort(Comparator.comparingLong(LogGroup::rows).reversed().thenComparing(LogGroup.ORDER));
    List<List<LogPartition>> groups = new ArrayList<>();
    long[] load = new long[tasks];
    for (int i = 0; i < tasks; i++) {
      groups.add(new ArrayList<>());
    }
    for (LogPartition p : bySize) {
      int least = 0;
      for (int i = 1; i < tasks; i++) {
        if (load[i] < load[least]) {
          least = i;
        }
      }
      groups.get(least).add(p);
      load[least] += rows(p);
    }
    InputPartition[] out = new InputPartition[tasks];
    for (int i = 0; i < tasks; i++) {
      LogPartition[] members = groups.get(i).toArray(new LogPartition[0]);
      Arrays.sort(members, ORDER);
      out[i] = members.length == 1 ? members[0] : new LogGroup(members);
    }
    return out;
  }

  // A partition's chunks in log order, and a deterministic order across relations.
  static final Comparator<LogPartition> ORDER = Comparator.<LogPartition>comparingInt(p -> p.relation)
      .thenComparingInt(p -> p.partition)
      .thenComparingLong(p -> p.start)
      .thenComparingInt(p -> p.tag == null ? Integer.MIN_VALUE : p.tag);
}
