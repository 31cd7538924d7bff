package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;

/**
 * The operators without Spark, over state in hash maps: tests drive random changes through them
 * (one call per batch, records grouped by (operator, key) as the pipeline does) and compare the
 * summed output with a recomputation.
 */
public final class Harness {
  private final Spec spec;
  private final Map<String, MemoryKeyState> states = new HashMap<>();
  // Temporal filters: the batch's processing time and each key's timers, as Spark keeps them.
  private long nowMs;
  private final Map<String, java.util.TreeSet<Long>> timers = new HashMap<>();
  // The driver's count of them (ClockCounts) for this run of the "pipeline", and the timers
  // pending when it started; checked after every batch against `timers`.
  private long run = 1;
  private java.util.TreeMap<Long, Long> base = new java.util.TreeMap<>();
  private ClockCounts counts = new ClockCounts();
  private static final ObjectMapper JSON = new ObjectMapper();

  public Harness(String specJson) {
    this.spec = Spec.parse(specJson);
    // Optional "texts": {"<op id>\u0000<key>": {text key: value}}: state as an earlier layout left it.
    try {
      JsonNode texts = JSON.readTree(specJson).get("texts");
      if (texts != null) {
        texts.fields().forEachRemaining(k -> {
          MemoryKeyState st = states.computeIfAbsent(k.getKey(), x -> new MemoryKeyState());
          k.getValue().fields().forEachRemaining(t -> st.putText(t.getKey(), t.getValue().asText()));
        });
      }
      // Optional "values": {"<op id>\u0000<key>": value}, likewise.
      JsonNode values = JSON.readTree(specJson).get("values");
      if (values != null) {
        values.fields().forEachRemaining(
            k -> states.computeIfAbsent(k.getKey(), x -> new MemoryKeyState()).setValue(k.getValue().asText()));
      }
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException(e);
    }
  }

  /** One batch: records as a JSON list of [op, side, k, row, row2, a, w]; returns the output likewise. */
  public String batch(String recordsJson) throws Exception {
    // The log source must tick when a timer is due (LogStream.tickOf): the count must say so.
    boolean anyDue = timers.values().stream().anyMatch(set -> !set.headSet(nowMs, true).isEmpty());
    if (anyDue && !counts.due(base, nowMs)) {
      throw new IllegalStateException("a timer is due at " + nowMs + " but the counts say none is");
    }
    List<Row> rows = new ArrayList<>();
    for (JsonNode n : JSON.readTree(recordsJson)) {
      String[] a = null;
      if (!n.get(5).isNull()) {
        a = new String[n.get(5).size()];
        for (int i = 0; i < a.length; i++) {
          a[i] = n.get(5).get(i).isNull() ? null : n.get(5).get(i).asText();
        }
      }
      rows.add(new Rec(n.get(0).asInt(), n.get(1).asInt(), n.get(2).isNull() ? "" : n.get(2).asText(),
                       text(n.get(3)), text(n.get(4)), a, n.get(6).asLong()).toRow());
    }
    // Through the combiner as in the pipeline (Layers.layer), flushing every 3 groups to test that too.
    Map<String, List<Rec>> byKey = new LinkedHashMap<>();
    for (Iterator<Row> it = new Combiner(rows.iterator(), spec, 3); it.hasNext(); ) {
      Rec r = Rec.of(it.next());
      byKey.computeIfAbsent(r.op + "\u0000" + r.k, x -> new ArrayList<>()).add(r);
    }
    List<Rec> results = new ArrayList<>();
    for (Map.Entry<String, List<Rec>> e : byKey.entrySet()) {
      List<Rec> recs = e.getValue();
      Spec.Op op = spec.op(recs.get(0).op);
      if (op != null) {
        applyTo(op, e.getKey(), recs.get(0).k, recs.iterator(), false, results);
      }
    }
    // Then the timers due at the batch's time, as Spark fires them after the input.
    List<String[]> due = new ArrayList<>();
    for (Map.Entry<String, java.util.TreeSet<Long>> t : timers.entrySet()) {
      for (long ms : t.getValue().headSet(nowMs, true)) {
        due.add(new String[] {t.getKey(), Long.toString(ms)});
      }
    }
    for (String[] d : due) {
      timers.get(d[0]).remove(Long.parseLong(d[1]));
      int split = d[0].indexOf('\u0000');
      Spec.Op op = spec.op(Integer.parseInt(d[0].substring(0, split)));
      applyTo(op, d[0], d[0].substring(split + 1), java.util.Collections.emptyIterator(), true, results);
    }
    timers.values().removeIf(java.util.TreeSet::isEmpty);
    long held = timers.values().stream().mapToLong(java.util.TreeSet::size).sum();
    if (counts.pending(base) != held) {
      throw new IllegalStateException("timers counted " + counts.pending(base) + ", pending " + held);
    }
    ArrayNode out = JSON.createArrayNode();
    for (Rec r : results) {
      ArrayNode row = out.addArray();
      row.add(r.op).add(r.side).add(r.k).add(r.row).add(r.row2);
      if (r.a == null) {
        row.addNull();
      } else {
        ArrayNode a = row.addArray();
        for (String x : r.a) {
          a.add(x);
        }
      }
      row.add(r.w);
    }
    return out.toString();
  }

  private void applyTo(Spec.Op op, String stateKey, String k, Iterator<Rec> recs, boolean timerFired,
                       List<Rec> results) {
    MemoryKeyState st = states.computeIfAbsent(stateKey, x -> new MemoryKeyState());
    // Counted as the pipeline counts its state rows (DeltaProcessor), checked against the maps.
    CountingKeyState counted = new CountingKeyState(st);
    long sizeBefore = st.size();
    if (op.kind == Spec.Kind.TEMPORAL) {
      Temporal.apply(op, k, recs, counted, results, new Temporal.Clock() {
        @Override
        public long nowMicros() {
          return nowMs * 1000L;
        }

        @Override
        public long run() {
          return run;
        }

        @Override
        public void register(long ms) {
          timers.computeIfAbsent(stateKey, x -> new java.util.TreeSet<>()).add(ms);
          counts.add(ClockCounts.thisRun(ms, 1));
        }

        @Override
        public void delete(long ms, long setBy) {
          java.util.TreeSet<Long> set = timers.get(stateKey);
          if (set == null || !set.remove(ms)) {
            throw new IllegalStateException("deleted a timer that is not set: " + ms);
          }
          fired(ms, setBy);
        }

        @Override
        public void fired(long ms, long setBy) {
          counts.add(ClockCounts.removed(ms, setBy, run));
        }
      }, timerFired);
    } else {
      Operators.apply(op, k, recs, counted, results);
    }
    long added = counted.takeDelta();
    if (st.size() - sizeBefore != added) {
      throw new IllegalStateException("state entries counted " + added + ", changed by " + (st.size() - sizeBefore));
    }
    if (st.isEmpty()) {
      states.remove(stateKey);
    }
  }

  /** Keys holding state, and keys with timers set: shows state is freed when it empties out. */
  public int keysWithState() {
    return states.size() + (int) timers.keySet().stream().filter(k -> !states.containsKey(k)).count();
  }

  /**
   * A line protocol for tests (tests/test_operators.py): a line holding a JSON object is a spec
   * (and starts over with empty state, or its "texts"), a line holding a JSON array is a batch, whose output is
   * printed on one line, followed by a line with the number of keys holding state.
   */
  public static void main(String[] args) throws Exception {
    java.io.BufferedReader in = new java.io.BufferedReader(
        new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8));
    java.io.PrintStream out = new java.io.PrintStream(System.out, true, "UTF-8");
    Harness h = null;
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (line.startsWith("{")) {
        h = new Harness(line);
        continue;
      }
      if (line.startsWith("@")) {  // the next batches' processing time, in ms
        h.nowMs = Long.parseLong(line.substring(1).trim());
        continue;
      }
      if (line.equals("!")) {  // the pipeline restarts: its timers are an earlier run's now
        h.base = h.counts.minutes(h.base);  // what the server keeps with each batch
        h.run++;
        h.counts = new ClockCounts();
        continue;
      }
      String result;
      try {
        result = h.batch(line);
      } catch (Exception e) {
        result = JSON.createObjectNode().put("error", String.valueOf(e)).toString();
      }
      out.println(result);
      out.println(h.keysWithState());
    }
  }

  private static String text(JsonNode n) {
    return n == null || n.isNull() ? null : n.asText();
  }
}
