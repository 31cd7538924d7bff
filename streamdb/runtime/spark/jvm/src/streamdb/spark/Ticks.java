package streamdb.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.util.LongAccumulator;

/**
 * How many rows the temporal filters of a pipeline hold (each has one timer pending), on the
 * driver: the pipeline's count when it started (kept by the server with each batch) plus what its
 * operators added since (an accumulator, complete once a batch's job has ended). The log source
 * ticks only while some are held: a pipeline whose windows are empty runs no batch until input
 * comes (LogStream.latestOffset).
 */
public final class Ticks {
  private Ticks() {}

  private static final class Count {
    final LongAccumulator added;
    final long base;

    Count(LongAccumulator added, long base) {
      this.added = added;
      this.base = base;
    }
  }

  private static final Map<String, Count> COUNTS = new ConcurrentHashMap<>();

  /** The pipeline `key` (its checkpoint) starts with `base` rows held; `added` counts the rest. */
  public static void register(String key, LongAccumulator added, long base) {
    COUNTS.put(key, new Count(added, base));
  }

  /** Rows held (timers pending); 1 for a pipeline not registered: it ticks. */
  public static long pending(String key) {
    Count c = COUNTS.get(key);
    return c == null ? 1 : c.base + c.added.value();
  }
}
