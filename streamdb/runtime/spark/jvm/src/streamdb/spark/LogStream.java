package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.types.StructType;

/**
 * Offsets `{"rels": {rel: [end per partition]}, "views": {view: {rel: [J...]}}, "bf": {view: {rel:
 * [backfilled up to...]}}}`, as in log_source.py: a view takes live changes from J on, and its
 * history before J as tagged backfill over as many batches as the per-batch budget needs.
 */
final class LogStream implements MicroBatchStream, SupportsAdmissionControl {
  static final long CHUNK = 125_000;
  static final long MAX_ROWS = 250_000;
  // Triggers of several pipelines within this of each other share one catch-up with the log
  // (LogStore.openRecent); one pipeline's triggers (100 ms apart) always catch up.
  static final long SHARED_CATCH_UP_NANOS = 50_000_000L;
  static final int SEED_RELATION = -1;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String planText;
  private final JsonNode plan;
  private final StructType schema;

  LogStream(String planText, StructType schema) {
    this.planText = planText;
    this.plan = LogProvider.plan(Map.of("plan", planText));
    this.schema = schema;
  }

  static final class LogOffset extends Offset {
    final ObjectNode value;  // never changed once the offset is made
    private String json;

    LogOffset(ObjectNode value) {
      this.value = value;
    }

    // Kept: Spark compares offsets by their JSON (Offset.equals) and writes it into each trigger's
    // progress, several times a trigger, and the offset names every view of the pipeline.
    @Override
    public String json() {
      if (json == null) {
        json = value.toString();
      }
      return json;
    }
  }

  // The last trigger's answer and what it was computed from: an idle pipeline's trigger (10 a
  // second) then reads the log's ends and returns the same offset, without building it again.
  private Offset lastStart;
  private long lastLimit;
  private long[] lastEnds;
  private long lastTick;
  private LogOffset lastLatest;

  static ObjectNode parse(String json) {
    try {
      return (ObjectNode) JSON.readTree(json);
    } catch (Exception e) {
      throw new IllegalArgumentException("bad log offset " + json, e);
    }
  }

  @Override
  public Offset initialOffset() {
    ObjectNode o = JSON.createObjectNode();
    o.putObject("rels");
    o.putObject("views");
    o.putObject("bf");
    return new LogOffset(o);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new LogOffset(parse(json));
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {}

  @Override
  public ReadLimit getDefaultReadLimit() {
    return ReadLimit.maxRows(plan.path("max_rows").asLong(MAX_ROWS));
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is the one used");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    ObjectNode start = ((LogOffset) startOffset).value;
    long maxRows = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : Long.MAX_VALUE;
    LogStore store = LogStore.openRecent(plan.get("log").get("path").asText(), SHARED_CATCH_UP_NANOS);
    long[] endsNow = endOffsets(store);
    // A pipeline with temporal filters (plan "tick_ms"): the offset moves at a tick when one of
    // their timers may be due (tickOf), input or not, so a batch runs and the timers fire (rows
    // leave as time passes); otherwise batches run only for new input, at the usual trigger.
    long tickMs = plan.path("tick_ms").asLong(0);
    long tick = tickMs > 0 ? tickOf(start, tickMs) : 0;
    if (lastLatest != null && lastLimit == maxRows && Arrays.equals(lastEnds, endsNow) && lastTick == tick
        && lastStart.equals(startOffset)) {
      return lastLatest;  // Offset.equals compares the (kept) JSON
    }
    long[] left = {maxRows};
    JsonNode views = plan.get("views");
    Map<String, long[]> floors = floors(views);
    ObjectNode out = JSON.createObjectNode();
    ObjectNode rels = out.putObject("rels");
    int at = 0;
    Map<String, long[]> startsOf = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = plan.get("relations").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String rid = e.getKey();
      int parts = e.getValue().get("partitions").asInt();
      long[] starts = longs(start.path("rels").get(rid), parts);
      if (!start.path("rels").has(rid)) {
        starts = floors.containsKey(rid) ? pad(floors.get(rid), parts) : null;
      }
      startsOf.put(rid, starts);
    }
    JsonNode hold = holding(plan.path("hold"), start, startsOf) ? plan.path("hold") : null;
    for (Iterator<Map.Entry<String, JsonNode>> it = plan.get("relations").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String rid = e.getKey();
      int parts = e.getValue().get("partitions").asInt();
      long[] starts = startsOf.get(rid);
      long[] held = hold != null && hold.has(rid) ? longs(hold.get(rid), parts) : null;
      ArrayNode ends = rels.putArray(rid);
      for (int p = 0; p < parts; p++) {
        long end = endsNow[at++];
        long lo = starts == null ? end : starts[p];
        if (held != null) {
          end = Math.min(end, Math.max(lo, held[p]));
        }
        ends.add(lo < end ? take(left, lo, end) : lo);
      }
    }
    out.set("views", views.deepCopy());
    JsonNode gens = plan.has("gens") ? plan.get("gens") : JSON.createObjectNode();
    out.set("gens", gens.deepCopy());
    ObjectNode bf = out.putObject("bf");
    for (Iterator<Map.Entry<String, JsonNode>> it = views.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String vid = e.getKey();
      JsonNode done = sameGeneration(start, views, gens, vid) ? start.path("bf").path(vid) : JSON.createObjectNode();
      ObjectNode progress = bf.putObject(vid);
      for (Iterator<Map.Entry<String, JsonNode>> r = e.getValue().fields(); r.hasNext(); ) {
        Map.Entry<String, JsonNode> join = r.next();
        long[] js = longs(join.getValue(), join.getValue().size());
        long[] from = longs(done.get(join.getKey()), js.length);
        ArrayNode a = progress.putArray(join.getKey());
        for (int p = 0; p < js.length; p++) {
          a.add(take(left, from[p], js[p]));
        }
      }
    }
    if (tickMs > 0) {
      out.put("tick", tick);
    }
    lastStart = startOffset;
    lastLimit = maxRows;
    lastEnds = endsNow;
    lastTick = tick;
    lastLatest = new LogOffset(out);
    return lastLatest;
  }

  /** Each relation's partitions' ends, in the plan's order of relations and partitions. */
  private long[] endOffsets(LogStore store) {
    List<Long> ends = new ArrayList<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = plan.get("relations").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      long rid = Long.parseLong(e.getKey());
      int parts = e.getValue().get("partitions").asInt();
      for (int p = 0; p < parts; p++) {
        ends.add(store.endOffset(rid, p));
      }
    }
    return ends.stream().mapToLong(Long::longValue).toArray();
  }

  /**
   * Whether the plan's hold (`{rel: [offset per partition]}`, the inputs as of a push query's
   * start) still bounds the next batch: while the first batch has not run or any partition is
   * below its hold, no partition goes past its own, so one batch ends exactly there and the view
   * then holds the result as of those offsets (docs/views.md, "Push queries").
   */
  static boolean holding(JsonNode hold, JsonNode start, Map<String, long[]> startsOf) {
    if (hold.isMissingNode() || hold.isNull() || hold.size() == 0) {
      return false;
    }
    if (!start.has("views") || start.path("views").size() == 0) {
      return true;
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = hold.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      long[] starts = startsOf.get(e.getKey());
      if (starts == null) {
        continue;
      }
      for (int p = 0; p < starts.length && p < e.getValue().size(); p++) {
        if (starts[p] < e.getValue().get(p).asLong()) {
          return true;
        }
      }
    }
    return false;
  }

  /**
   * Whether `start` holds the backfill progress of this generation of the view: the same join
   * points and the same generation (a view rebuilt under its id has new operators, whose state
   * starts empty: its whole history is backfilled again, and its seed row sent again). Offsets
   * written before generations were recorded compare by join points alone.
   */
  private static boolean sameGeneration(JsonNode start, JsonNode views, JsonNode gens, String vid) {
    JsonNode before = start.path("views").path(vid);
    if (before.isMissingNode() || !before.equals(views.path(vid))) {
      return false;
    }
    return !start.has("gens") || start.path("gens").path(vid).equals(gens.path(vid));
  }

  private static long take(long[] left, long lo, long hi) {
    long n = Math.max(0, Math.min(hi - lo, left[0]));
    left[0] -= n;
    return lo + n;
  }

  static Map<String, long[]> floors(JsonNode views) {
    Map<String, long[]> floors = new LinkedHashMap<>();
    for (JsonNode joins : views) {
      for (Iterator<Map.Entry<String, JsonNode>> it = joins.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        long[] js = longs(e.getValue(), e.getValue().size());
        long[] f = floors.get(e.getKey());
        if (f == null) {
          floors.put(e.getKey(), js);
        } else {
          for (int i = 0; i < Math.min(f.length, js.length); i++) {
            f[i] = Math.min(f[i], js[i]);
          }
        }
      }
    }
    return floors;
  }

  static long[] longs(JsonNode array, int n) {
    long[] out = new long[n];
    if (array != null) {
      for (int i = 0; i < n && i < array.size(); i++) {
        out[i] = array.get(i).asLong();
      }
    }
    return out;
  }

  static long[] pad(long[] values, int n) {
    long[] out = new long[n];
    System.arraycopy(values, 0, out, 0, Math.min(n, values.length));
    return out;
  }

  /**
   * The tick of the next batch: the clock's while a temporal filter's timer may be due, else the
   * last batch's, so an idle pipeline runs no batch until a row's time comes. Once a minute it
   * ticks regardless: a count gone wrong (a task's accumulator counted twice) delays rows by a
   * minute at most, never for good.
   */
  private long tickOf(ObjectNode start, long tickMs) {
    long now = System.currentTimeMillis();
    if (Ticks.due(plan.path("tick_key").asText(""), now)) {
      return now / tickMs;
    }
    long slow = Math.max(tickMs, IDLE_TICK_MS);
    long idle = now / slow * slow / tickMs;
    return Math.max(start.path("tick").asLong(0), idle);
  }

  static final long IDLE_TICK_MS = 60_000;

  @Override
  public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    ObjectNode start = ((LogOffset) startOffset).value;
    ObjectNode end = ((LogOffset) endOffset).value;
    List<LogPartition> out = new ArrayList<>();
    Map<String, long[]> floors = floors(end.path("views"));
    for (Iterator<Map.Entry<String, JsonNode>> it = end.path("rels").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String rid = e.getKey();
      int parts = e.getValue().size();
      long[] ends = longs(e.getValue(), parts);
      long[] starts;
      if (start.path("rels").has(rid)) {
        starts = longs(start.path("rels").get(rid), parts);
      } else if (floors.containsKey(rid)) {
        starts = pad(floors.get(rid), parts);
      } else {
        starts = ends;
      }
      for (int p = 0; p < parts; p++) {
        chunks(out, Integer.parseInt(rid), p, starts[p], ends[p], null);
      }
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = end.path("bf").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String vid = e.getKey();
      boolean fresh = !sameGeneration(start, end.path("views"), end.path("gens"), vid);
      if (fresh) {
        out.add(new LogPartition(SEED_RELATION, 0, 0, 1, Integer.parseInt(vid)));
      }
      JsonNode before = fresh ? JsonNodeFactory.instance.objectNode() : start.path("bf").path(vid);
      for (Iterator<Map.Entry<String, JsonNode>> r = e.getValue().fields(); r.hasNext(); ) {
        Map.Entry<String, JsonNode> his = r.next();
        long[] hi = longs(his.getValue(), his.getValue().size());
        long[] lo = longs(before.get(his.getKey()), hi.length);
        for (int p = 0; p < hi.length; p++) {
          chunks(out, Integer.parseInt(his.getKey()), p, lo[p], hi[p], Integer.parseInt(vid));
        }
      }
    }
    return LogGroup.of(out);
  }

  private static void chunks(List<LogPartition> out, int rid, int part, long lo, long hi, Integer tag) {
    while (lo < hi) {
      out.add(new LogPartition(rid, part, lo, Math.min(hi, lo + CHUNK), tag));
      lo += CHUNK;
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new LogReaderFactory(planText, schema.json());
  }
}
