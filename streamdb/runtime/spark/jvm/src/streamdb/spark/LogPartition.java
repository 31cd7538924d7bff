package streamdb.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Changes [start, end) of one log partition of one relation; `tag`: the view a backfill is for. */
final class LogPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final int relation;
  final int partition;
  final long start;
  final long end;
  final Integer tag;

  LogPartition(int relation, int partition, long start, long end, Integer tag) {
    this.relation = relation;
    this.partition = partition;
    this.start = start;
    this.end = end;
    this.tag = tag;
  }
}
