package streamdb.spark;

import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.util.AccumulatorV2;

/**
 * The timers a pipeline's temporal filters have pending, summed on the driver, where the log
 * source reads them to tick only when one may be due (Ticks, LogStream.tickOf): per second of
 * their time, those this run of the pipeline set less those it removed; and per minute, those
 * set by earlier runs that it removed. What earlier runs left pending is the base, per minute,
 * kept by the server with each batch (`minutes`).
 */
public final class ClockCounts extends AccumulatorV2<long[], ClockCounts> {
  private static final long serialVersionUID = 1L;
  private static final long SECOND = 1000L;
  private static final long MINUTE = 60_000L;
  private final TreeMap<Long, Long> seconds = new TreeMap<>();
  private final TreeMap<Long, Long> oldRemoved = new TreeMap<>();  // minute -> timers removed

  /** A timer at `ms` set (+1) or removed (-1) by this run. */
  static long[] thisRun(long ms, long delta) {
    return new long[] {0, Math.floorDiv(ms, SECOND), delta};
  }

  /** A timer at `ms` set by run `setBy`, removed (deleted, or fired) in run `run`. */
  static long[] removed(long ms, long setBy, long run) {
    return setBy == run ? thisRun(ms, -1) : new long[] {1, Math.floorDiv(ms, MINUTE), 1};
  }

  private static void add(TreeMap<Long, Long> m, long key, long delta) {
    m.merge(key, delta, (a, b) -> a + b == 0 ? null : a + b);
  }

  @Override
  public synchronized boolean isZero() {
    return seconds.isEmpty() && oldRemoved.isEmpty();
  }

  @Override
  public synchronized ClockCounts copy() {
    ClockCounts c = new ClockCounts();
    c.seconds.putAll(seconds);
    c.oldRemoved.putAll(oldRemoved);
    return c;
  }

  @Override
  public synchronized void reset() {
    seconds.clear();
    oldRemoved.clear();
  }

  @Override
  public synchronized void add(long[] change) {
    add(change[0] == 0 ? seconds : oldRemoved, change[1], change[2]);
  }

  @Override
  public void merge(AccumulatorV2<long[], ClockCounts> other) {
    ClockCounts o = ((ClockCounts) other).copy();
    synchronized (this) {
      o.seconds.forEach((k, v) -> add(seconds, k, v));
      o.oldRemoved.forEach((k, v) -> add(oldRemoved, k, v));
    }
  }

  @Override
  public ClockCounts value() {
    return this;
  }

  /** Timers pending per minute of their time, given `base` pending per minute at the run's start. */
  public synchronized TreeMap<Long, Long> minutes(Map<Long, Long> base) {
    TreeMap<Long, Long> out = new TreeMap<>(base);
    oldRemoved.forEach((k, v) -> add(out, k, -v));
    seconds.forEach((k, v) -> add(out, Math.floorDiv(k * SECOND, MINUTE), v));
    return out;
  }

  /** Timers pending, given `base`. */
  public synchronized long pending(Map<Long, Long> base) {
    long n = 0;
    for (long v : minutes(base).values()) {
      n += v;
    }
    return n;
  }

  /**
   * Whether a timer may be due at `nowMs`: one an earlier run set in a minute that has begun is
   * still pending (its second is not known), or one of this run's is, in a second that has.
   */
  public synchronized boolean due(Map<Long, Long> base, long nowMs) {
    long minute = Math.floorDiv(nowMs, MINUTE);
    for (Map.Entry<Long, Long> e : base.entrySet()) {
      if (e.getKey() <= minute && e.getValue() - oldRemoved.getOrDefault(e.getKey(), 0L) > 0) {
        return true;
      }
    }
    for (Map.Entry<Long, Long> e : seconds.headMap(Math.floorDiv(nowMs, SECOND), true).entrySet()) {
      if (e.getValue() > 0) {
        return true;
      }
    }
    return false;
  }
}
