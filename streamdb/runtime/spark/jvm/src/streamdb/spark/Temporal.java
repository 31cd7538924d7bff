package streamdb.spark;

import java.util.Iterator;
import java.util.List;

/**
 * A temporal filter (`WHERE ts > now() - INTERVAL '1 hour'`): each distinct row is a key of its
 * own, holding its count while it may still be shown; a row is shown while every start bound is
 * at or before now and now is before every end bound. `now` is the micro-batch's processing time
 * (Spark keeps it in the offset log, so a replayed batch sees the same instant). A row whose
 * interval is ahead waits for a timer at its start; a shown row has a timer at its end, which
 * retracts it and drops its state: the state holds the rows of the filter's window, not the input.
 */
final class Temporal {
  private Temporal() {}

  /** The processor's clock and timers for the current key (DeltaProcessor). */
  interface Clock {
    long nowMicros();

    /** This run of the pipeline (its start, Spec): timers set by another were set before it. */
    long run();

    void register(long ms);

    /** Deletes a timer set by run `setBy`. */
    void delete(long ms, long setBy);

    /** A timer set by run `setBy` fired (Spark deletes it). */
    void fired(long ms, long setBy);
  }

  static final long NONE = Long.MIN_VALUE;

  /**
   * Applies the key's changes (none when a timer fired) at the clock's now. A key holds state only
   * while its row's showing can still change: "count,shown,start,end,timer,run" (the timer in ms,
   * and the run of the pipeline that set it: ClockCounts). A row
   * past its end never shows again, and one past its start with no end shows for good; neither
   * keeps state, and their later changes are dropped or passed on as they come. `timerFired`: the
   * stored timer is the one that fired, which Spark deletes itself.
   */
  static void apply(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out, Clock clock,
                    boolean timerFired) {
    String stored = st.value();
    long count = 0;
    boolean shown = false;
    long start = Long.MIN_VALUE;
    long end = Long.MAX_VALUE;
    long timer = NONE;
    long setBy = NONE;
    boolean known = stored != null;
    if (known) {
      String[] f = stored.split(",", -1);
      count = Long.parseLong(f[0]);
      shown = "1".equals(f[1]);
      start = Long.parseLong(f[2]);
      end = Long.parseLong(f[3]);
      timer = Long.parseLong(f[4]);
      setBy = setBy(f);
    }
    if (timerFired && timer != NONE) {
      clock.fired(timer, setBy);
      timer = NONE;
    }
    long before = shown ? count : 0;
    long changes = 0;
    while (in.hasNext()) {
      Rec r = in.next();
      long[] bounds = bounds(s, r);
      if (bounds == null) {
        continue;  // a NULL bound: the comparison is never true, so the row never shows
      }
      start = bounds[0];
      end = bounds[1];
      changes += r.w;
      known = true;
    }
    if (!known) {
      return;
    }
    long now = clock.nowMicros();
    if (stored == null) {
      if (now >= end) {
        return;  // its time has passed: the row is not shown, and changes to it are not either
      }
      if (start <= now && end == Long.MAX_VALUE) {
        if (changes != 0) {
          out.add(new Rec(s.id, 0, key, key, null, null, changes));  // shown for good
        }
        return;
      }
    }
    count += changes;
    boolean show = count > 0 && start <= now && now < end;
    long delta = (show ? count : 0) - before;
    if (delta != 0) {
      out.add(new Rec(s.id, 0, key, key, null, null, delta));
    }
    long next = now < start ? start : now < end && end != Long.MAX_VALUE ? end : NONE;
    if (count == 0 || next == NONE) {
      // Nothing held, or its showing will not change again (past its end, or shown for good).
      if (timer != NONE) {
        clock.delete(timer, setBy);
      }
      st.clear();
      return;
    }
    long nextMs = ceilMillis(next);
    if (nextMs != timer) {
      if (timer != NONE) {
        clock.delete(timer, setBy);
      }
      clock.register(nextMs);
      setBy = clock.run();
    }
    st.setValue(count + "," + (show ? "1" : "0") + "," + start + "," + end + "," + nextMs + "," + setBy);
  }

  /** A timer of an operator no longer in the spec (its view dropped) fired: the key's state goes. */
  static void dropped(KeyState st, long ms, Clock clock) {
    String stored = st.value();
    clock.fired(ms, stored == null ? NONE : setBy(stored.split(",", -1)));
    st.clear();
  }

  /** The run that set the stored timer (NONE: unknown, an earlier one's). */
  private static long setBy(String[] stored) {
    return stored.length > 5 ? Long.parseLong(stored[5]) : NONE;
  }

  /** [start, end) of a record's row in microseconds, or null if a bound is NULL. */
  static long[] bounds(Spec.Op s, Rec r) {
    long start = Long.MIN_VALUE;
    long end = Long.MAX_VALUE;
    for (int i = 0; i < s.clockOffsets.length; i++) {
      String v = r.arg(i);
      if (v == null) {
        return null;
      }
      long at = saturatedAdd(Long.parseLong(v), s.clockOffsets[i]);
      if (s.clockStarts[i]) {
        start = Math.max(start, at);
      } else {
        end = Math.min(end, at);
      }
    }
    return new long[] {start, end};
  }

  static long ceilMillis(long micros) {
    return Math.floorDiv(micros, 1000L) + (Math.floorMod(micros, 1000L) == 0 ? 0 : 1);
  }

  private static long saturatedAdd(long a, long b) {
    long r = a + b;
    if (((a ^ r) & (b ^ r)) < 0) {
      return a < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
    }
    return r;
  }
}
