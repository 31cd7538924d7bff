package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** The operator instances of one layer, parsed from the JSON the Python compiler writes. */
public final class Spec implements Serializable {
  private static final long serialVersionUID = 1L;

  public enum Kind { JOIN, REDUCE, TOPN, ARRANGE, SESSION, TEMPORAL, PASS }

  /** One aggregate of a REDUCE operator. */
  public static final class Agg implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String fn;     // count_star, count, sum, avg, min, max, count_distinct, bool_and, bool_or
    public final int arg;       // index into the record's `a` array (-1 for count_star)
    public final ValueType type;

    Agg(String fn, int arg, ValueType type) {
      this.fn = fn;
      this.arg = arg;
      this.type = type;
    }
  }

  /** One ORDER BY key of a TOPN operator. */
  public static final class SortKey implements Serializable {
    private static final long serialVersionUID = 1L;
    public final int arg;
    public final ValueType type;
    public final boolean desc;
    public final boolean nullsFirst;

    SortKey(int arg, ValueType type, boolean desc, boolean nullsFirst) {
      this.arg = arg;
      this.type = type;
      this.desc = desc;
      this.nullsFirst = nullsFirst;
    }
  }

  /** One operator instance: what it is and how it is parameterised. */
  public static final class Op implements Serializable {
    private static final long serialVersionUID = 1L;
    public final int id;
    public final Kind kind;
    public final String joinType;           // JOIN: inner, left, right, full
    public final List<Agg> aggs;            // REDUCE
    public final boolean global;            // REDUCE: no GROUP BY (one row even over no input)
    public final boolean appendOnly;        // input never retracts (streams): less state
    public final long limit;                // TOPN: -1 for none
    public final long offset;               // TOPN
    public final List<SortKey> order;       // TOPN
    public final int reserve;               // TOPN over retracting input: rows cached past the top
    public final boolean ties;              // TOPN: RANK() <= LIMIT (peers of the last row kept), no OFFSET
    public final long gapMicros;            // SESSION: the gap that ends a session
    public final String startKey;           // SESSION: the window_start field of an output row, as JSON `"name":`
    public final String endKey;             // SESSION: the window_end field
    final Residual residual;                // JOIN (inner): comparisons each emitted pair passes; or null
    // TEMPORAL: for each of the record's `a` values (microseconds), the offset added to it and
    // whether the sum is where the row starts to hold (true: now >= it) or stops (false: now < it).
    public long[] clockOffsets = new long[0];
    public boolean[] clockStarts = new boolean[0];

    Op(int id, Kind kind, String joinType, List<Agg> aggs, boolean global, boolean appendOnly, long limit,
       long offset, List<SortKey> order, int reserve, boolean ties, long gapMicros, String startKey, String endKey,
       Residual residual) {
      this.id = id;
      this.kind = kind;
      this.joinType = joinType;
      this.aggs = aggs;
      this.global = global;
      this.appendOnly = appendOnly;
      this.limit = limit;
      this.offset = offset;
      this.order = order;
      this.reserve = reserve;
      this.ties = ties;
      if (ties && (offset != 0 || limit < 0)) {
        throw new IllegalArgumentException("a top-N with ties takes a LIMIT and no OFFSET");
      }
      this.gapMicros = gapMicros;
      this.startKey = startKey;
      this.endKey = endKey;
      this.residual = residual;
      if (residual != null && !"inner".equals(joinType)) {
        throw new IllegalArgumentException("join comparisons on an outer join");  // they would change its padding
      }
    }

    boolean leftOuter() {
      return "left".equals(joinType) || "full".equals(joinType);
    }

    boolean rightOuter() {
      return "right".equals(joinType) || "full".equals(joinType);
    }
  }

  /** Rows a top-N keeps cached beyond its top (Operators.topn): retractions of that many top rows cost no re-read. */
  static final int TOP_RESERVE = 32;

  private final Map<Integer, Op> ops;
  private final long run;  // this start of the pipeline (ms): temporal filters' timers name it

  private Spec(Map<Integer, Op> ops, long run) {
    this.ops = ops;
    this.run = run;
  }

  public long run() {
    return run;
  }

  public Op op(int id) {
    return ops.get(id);
  }

  public int size() {
    return ops.size();
  }

  public static Spec parse(String json) {
    try {
      JsonNode root = new ObjectMapper().readTree(json);
      Map<Integer, Op> ops = new HashMap<>();
      for (JsonNode n : root.path("ops")) {
        int id = n.path("id").asInt();
        Kind kind = Kind.valueOf(n.path("kind").asText().toUpperCase());
        List<Agg> aggs = new ArrayList<>();
        for (JsonNode a : n.path("aggs")) {
          aggs.add(new Agg(a.path("fn").asText(), a.path("arg").asInt(-1),
                           ValueType.of(a.path("type").asText("long"))));
        }
        List<SortKey> order = new ArrayList<>();
        for (JsonNode o : n.path("order")) {
          order.add(new SortKey(o.path("arg").asInt(), ValueType.of(o.path("type").asText()),
                                o.path("desc").asBoolean(false), o.path("nulls_first").asBoolean(false)));
        }
        ObjectMapper m = new ObjectMapper();
        String startKey = m.writeValueAsString(n.path("bounds").path(0).asText("window_start")) + ":";
        String endKey = m.writeValueAsString(n.path("bounds").path(1).asText("window_end")) + ":";
        ops.put(id, new Op(id, kind, n.path("join").asText("inner"), aggs, n.path("global").asBoolean(false),
                           n.path("append_only").asBoolean(false), n.path("limit").asLong(-1),
                           n.path("offset").asLong(0), order, n.path("reserve").asInt(TOP_RESERVE),
                           n.path("ties").asBoolean(false),
                           n.path("gap").asLong(0), startKey, endKey,
                           Residual.parse(n.get("residual"))));
        JsonNode clock = n.path("clock");
        if (clock.size() > 0) {
          Op op = ops.get(id);
          op.clockOffsets = new long[clock.size()];
          op.clockStarts = new boolean[clock.size()];
          for (int i = 0; i < clock.size(); i++) {
            op.clockOffsets[i] = clock.get(i).path("offset").asLong();
            op.clockStarts[i] = "from".equals(clock.get(i).path("kind").asText());
          }
        }
      }
      return new Spec(ops, root.path("run").asLong(0));
    } catch (Exception e) {
      throw new IllegalArgumentException("bad operator spec: " + e.getMessage(), e);
    }
  }
}
