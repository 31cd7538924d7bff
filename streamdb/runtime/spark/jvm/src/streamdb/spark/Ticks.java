package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The timers a pipeline's temporal filters have pending, on the driver: those pending when it
 * started, per minute of their time (kept by the server with each batch, `state`), and what its
 * operators set and removed since (ClockCounts, complete once a batch's job has ended). The log
 * source ticks only while a timer may be due (LogStream.tickOf): an idle pipeline whose rows
 * leave in an hour runs no batch until then.
 */
public final class Ticks {
  private Ticks() {}

  private static final ObjectMapper JSON = new ObjectMapper();

  private static final class Run {
    final ClockCounts counts;
    final TreeMap<Long, Long> base;

    Run(ClockCounts counts, TreeMap<Long, Long> base) {
      this.counts = counts;
      this.base = base;
    }
  }

  private static final Map<String, Run> RUNS = new ConcurrentHashMap<>();

  /**
   * The pipeline `key` (its checkpoint) starts with the timers of `baseJson` pending ({minute:
   * count}, as `state` wrote it; a count under "?" is of unknown time: always due).
   */
  public static void register(String key, ClockCounts counts, String baseJson) {
    TreeMap<Long, Long> base = new TreeMap<>();
    try {
      JsonNode n = JSON.readTree(baseJson);
      for (Iterator<Map.Entry<String, JsonNode>> it = n.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        base.put("?".equals(e.getKey()) ? Long.MIN_VALUE : Long.parseLong(e.getKey()), e.getValue().asLong());
      }
    } catch (Exception e) {
      base.put(Long.MIN_VALUE, 1L);  // unreadable: assume a timer due now and then
    }
    RUNS.put(key, new Run(counts, base));
  }

  /**
   * The pending timers per minute as JSON, for the server to keep with the batch. Timers of
   * unknown time (a restart that found no count kept) are left out: this run ticks every second
   * for them, the next one only once a minute until they fire.
   */
  public static String state(String key) {
    Run r = RUNS.get(key);
    StringBuilder out = new StringBuilder("{");
    if (r == null) {
      return out.append('}').toString();
    }
    for (Map.Entry<Long, Long> e : r.counts.minutes(r.base).entrySet()) {
      if (e.getKey() == Long.MIN_VALUE) {
        continue;
      }
      if (out.length() > 1) {
        out.append(',');
      }
      out.append('"').append(e.getKey()).append("\":").append(e.getValue());
    }
    return out.append('}').toString();
  }

  /** Whether a timer may be due at `nowMs`; true for a pipeline not registered. */
  public static boolean due(String key, long nowMs) {
    Run r = RUNS.get(key);
    return r == null || r.counts.due(r.base, nowMs);
  }
}
