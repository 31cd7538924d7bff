package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import java.math.BigDecimal;
import java.math.MathContext;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The incremental operators, one call per (operator instance, key) and micro-batch: the key's
 * changes go in, the changes of the operator's output come out (DBSP: every relation is a
 * multiset of rows with integer weights). Work is proportional to the changes and to the state
 * of the keys they touch, never to the whole input.
 */
public final class Operators {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Operators() {}

  public static void apply(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    switch (s.kind) {
      case JOIN:
        join(s, key, in, st, out);
        break;
      case REDUCE:
        reduce(s, key, in, st, out);
        break;
      case TOPN:
        topn(s, key, in, st, out);
        break;
      case ARRANGE:
        arrange(s, key, in, st, out);
        break;
      case SESSION:
        session(s, key, in, st, out);
        break;
      default:
        while (in.hasNext()) {
          out.add(in.next());
        }
    }
  }

  // ---- join: the delta rule over both sides indexed by the join key ----------------------

  /**
   * Records are applied one at a time, each against the other side as it stands, which sums to
   * dA x B + A x dB + dA x dB. Outer joins pad a row with NULLs while the other side of its key
   * is empty; when that side becomes empty or non-empty the padded rows are retracted or emitted.
   */
  static void join(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    long[] totals = longs(st.value(), 2);
    @SuppressWarnings("unchecked")
    Map<String, Long>[] sides = new Map[2];
    Map<List<String>, Long> emitted = new LinkedHashMap<>();
    // The key's changes in this batch netted per (side, row) first. The result is the same (each
    // change applied against the other side as it stands sums to the final join minus the first,
    // in any order), but a row that changes k times in a batch (a window's running max in Nexmark
    // q5) costs one pass over the other side instead of k, and k times fewer pairs held: q5 ran
    // the heap out at 5M events without it.
    @SuppressWarnings("unchecked")
    Map<String, Long>[] net = new Map[] {new LinkedHashMap<String, Long>(), new LinkedHashMap<String, Long>()};
    while (in.hasNext()) {
      Rec r = in.next();
      if (r.w != 0 && r.row != null) {
        net[r.side == 0 ? 0 : 1].merge(r.row, r.w, Long::sum);
      }
    }
    Residual.Rows parsed = s.residual == null ? null : new Residual.Rows();
    for (int me = 0; me < 2; me++) {
      for (Map.Entry<String, Long> change : net[me].entrySet()) {
        String row = change.getKey();
        long w = change.getValue();
        if (w != 0) {
          joinOne(s, st, sides, emitted, totals, me, row, w, parsed);
        }
      }
    }
    if (totals[0] == 0 && totals[1] == 0) {
      st.clearValue();
    } else {
      st.setValue(totals[0] + "," + totals[1]);
    }
    for (Map.Entry<List<String>, Long> e : emitted.entrySet()) {
      if (e.getValue() != 0) {
        out.add(new Rec(s.id, 0, key, e.getKey().get(0), e.getKey().get(1), null, e.getValue()));
      }
    }
  }

  private static void joinOne(Spec.Op s, KeyState st, Map<String, Long>[] sides, Map<List<String>, Long> emitted,
                              long[] totals, int me, String row, long w, Residual.Rows parsed) {
    int other = 1 - me;
    Map<String, Long> others = side(sides, other, st);
    for (Map.Entry<String, Long> e : others.entrySet()) {
      String left = me == 0 ? row : e.getKey();
      String right = me == 0 ? e.getKey() : row;
      if (s.residual == null || s.residual.test(left, right, parsed)) {
        emit(emitted, left, right, w * e.getValue());
      }
    }
    boolean myOuter = me == 0 ? s.leftOuter() : s.rightOuter();
    boolean otherOuter = me == 0 ? s.rightOuter() : s.leftOuter();
    if (myOuter && totals[other] == 0) {
      emit(emitted, me == 0 ? row : null, me == 0 ? null : row, w);
    }
    long before = totals[me];
    long after = before + w;
    if (otherOuter && (before == 0) != (after == 0)) {
      long sign = before == 0 ? -1 : 1;  // the other side's padded rows go away, or come back
      for (Map.Entry<String, Long> e : others.entrySet()) {
        emit(emitted, me == 0 ? null : e.getKey(), me == 0 ? e.getKey() : null, sign * e.getValue());
      }
    }
    long n = st.add(me, row, w);
    if (sides[me] != null) {
      if (n == 0) {
        sides[me].remove(row);
      } else {
        sides[me].put(row, n);
      }
    }
    totals[me] = after;
  }

  private static Map<String, Long> side(Map<String, Long>[] sides, int which, KeyState st) {
    if (sides[which] == null) {
      Map<String, Long> m = new LinkedHashMap<>();
      for (Iterator<Map.Entry<String, Long>> it = st.entries(which); it.hasNext(); ) {
        Map.Entry<String, Long> e = it.next();
        m.put(e.getKey(), e.getValue());
      }
      sides[which] = m;
    }
    return sides[which];
  }

  private static void emit(Map<List<String>, Long> emitted, String left, String right, long w) {
    if (w != 0) {
      emitted.merge(Arrays.asList(left, right), w, Long::sum);
    }
  }

  // ---- reduce: GROUP BY with aggregates that retract ---------------------------------------

  /** Partial aggregates of one group: the sum of weights, then per aggregate its partial values. */
  static final class Partials {
    long n;
    final List<String[]> p = new ArrayList<>();
    private final Map<Integer, Extremes> extremes = new HashMap<>();  // parsed once per batch

    Extremes extremes(int j, ValueType t, boolean max) {
      return extremes.computeIfAbsent(j, i -> new Extremes(t, max, p.get(i)));
    }

    /** Writes the min/max caches back into their partials (before outputs and serialize). */
    void flush() {
      for (Map.Entry<Integer, Extremes> e : extremes.entrySet()) {
        e.getValue().store(p.get(e.getKey()));
      }
    }

    static Partials empty(Spec.Op s) {
      Partials x = new Partials();
      for (Spec.Agg a : s.aggs) {
        x.p.add(initial(a));
      }
      return x;
    }

    static String[] initial(Spec.Agg a) {
      switch (a.fn) {
        case "count_star":
          return new String[0];
        case "count":
        case "count_distinct":
          return new String[] {"0"};
        case "sum":
        case "avg":
          return new String[] {"0", "0", "0", "0", "0"};  // count, exact sum, NaN, +inf, -inf
        case "min":
        case "max":
          // count, current value, the best values with their counts (Extremes), whether those are all
          return new String[] {"0", null, "[]", "1"};
        default:
          return new String[] {"0", null};  // count, trues (bool_*)
      }
    }

    static Partials parse(String text, Spec.Op s) {
      try {
        JsonNode root = JSON.readTree(text);
        Partials x = new Partials();
        x.n = root.get(0).asLong();
        for (int j = 0; j < s.aggs.size(); j++) {
          JsonNode node = root.get(j + 1);
          String[] v = new String[node.size()];
          for (int i = 0; i < v.length; i++) {
            v[i] = node.get(i).isNull() ? null : node.get(i).asText();
          }
          String fn = s.aggs.get(j).fn;
          if ((fn.equals("min") || fn.equals("max")) && v.length == 2) {
            v = new String[] {v[0], v[1], "[]", "0"};  // state written before Extremes: rebuilt when needed
          }
          x.p.add(v);
        }
        return x;
      } catch (Exception e) {
        throw new IllegalStateException("corrupt aggregate state: " + e.getMessage(), e);
      }
    }

    String serialize() {
      ArrayNode root = JSON.createArrayNode();
      root.add(n);
      for (String[] v : p) {
        ArrayNode a = root.addArray();
        for (String x : v) {
          if (x == null) {
            a.addNull();
          } else {
            a.add(x);
          }
        }
      }
      return root.toString();
    }
  }

  /**
   * The side of a record telling a Reduce that its group's window has closed and was emitted (an
   * EMIT ON WINDOW CLOSE view's own output, fed back): the group's state is dropped, with nothing
   * emitted. A change arriving for it later (a late event) starts a group the server ignores.
   */
  static final int EXPIRE_SIDE = 1;

  static void reduce(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    String stored = st.value();
    Partials p = stored == null ? Partials.empty(s) : Partials.parse(stored, s);
    boolean existed = stored != null && (s.global || p.n > 0);
    String[] before = existed ? outputs(s, p) : null;
    boolean expired = false;
    while (in.hasNext()) {
      Rec r = in.next();
      if (r.side == EXPIRE_SIDE) {
        expired = true;
        continue;
      }
      if (r.side == PartialAgg.SIDE) {  // a task's changes to this group, summed before the shuffle
        p.n += r.w;
        PartialAgg.merge(s, r.a, p.p);
        continue;
      }
      if (r.w == 0) {
        continue;
      }
      p.n += r.w;
      for (int j = 0; j < s.aggs.size(); j++) {
        accumulate(s, j, s.aggs.get(j), p, r.arg(s.aggs.get(j).arg), r.w, st);
      }
    }
    if (expired) {
      st.clear();
      return;
    }
    p.flush();
    boolean exists = s.global || p.n > 0;
    String[] after = exists ? outputs(s, p) : null;
    if (exists) {
      st.setValue(p.serialize());
    } else {
      st.clearValue();
    }
    if (existed && exists && Arrays.equals(before, after)) {
      return;
    }
    if (existed) {
      out.add(new Rec(s.id, 0, key, null, null, before, -1));
    }
    if (exists) {
      out.add(new Rec(s.id, 0, key, null, null, after, 1));
    }
  }

  private static void accumulate(Spec.Op s, int j, Spec.Agg a, Partials p, String x, long w, KeyState st) {
    String[] v = p.p.get(j);
    if (a.fn.equals("count_star") || x == null) {
      return;
    }
    switch (a.fn) {
      case "count":
        v[0] = Long.toString(Long.parseLong(v[0]) + w);
        return;
      case "count_distinct": {
        long n = st.add(0, "d" + j + ":" + x, w);
        long was = n - w;
        if (was <= 0 && n > 0) {
          v[0] = Long.toString(Long.parseLong(v[0]) + 1);
        } else if (was > 0 && n <= 0) {
          v[0] = Long.toString(Long.parseLong(v[0]) - 1);
        }
        return;
      }
      case "sum":
      case "avg": {
        v[0] = Long.toString(Long.parseLong(v[0]) + w);
        BigDecimal weight = BigDecimal.valueOf(w);
        if (a.type == ValueType.DOUBLE) {
          double d = Double.parseDouble(x);
          int slot = Double.isNaN(d) ? 2 : d == Double.POSITIVE_INFINITY ? 3 : d == Double.NEGATIVE_INFINITY ? 4 : 1;
          if (slot != 1) {
            v[slot] = Long.toString(Long.parseLong(v[slot]) + w);
            return;
          }
          v[1] = new BigDecimal(v[1]).add(new BigDecimal(d).multiply(weight)).toPlainString();
        } else {
          v[1] = new BigDecimal(v[1]).add(new BigDecimal(x).multiply(weight)).toPlainString();
        }
        return;
      }
      case "bool_and":
      case "bool_or":
        v[0] = Long.toString(Long.parseLong(v[0]) + w);
        if (Boolean.parseBoolean(x)) {
          v[1] = Long.toString((v[1] == null ? 0 : Long.parseLong(v[1])) + w);
        }
        return;
      case "min":
      case "max": {
        v[0] = Long.toString(Long.parseLong(v[0]) + w);
        boolean max = a.fn.equals("max");
        if (s.appendOnly) {
          if (w > 0 && (v[1] == null || better(a.type, max, x, v[1]))) {
            v[1] = x;
          }
          return;
        }
        String prefix = "m" + j + ":";
        st.add(0, prefix + x, w);
        p.extremes(j, a.type, max).apply(x, w, st, prefix);
        return;
      }
      default:
        throw new IllegalArgumentException("unknown aggregate " + a.fn);
    }
  }

  static boolean better(ValueType t, boolean max, String x, String current) {
    int c = t.compare(x, current);
    return max ? c > 0 : c < 0;
  }

  /**
   * min/max over input that retracts: the group's values are a multiset in the key's state, and
   * the SIZE best of them (with their counts) are cached in the partials. Invariant: every value
   * of the multiset better than the cache's worst is in the cache (`complete`: all of them are).
   * Retracting the extreme takes the next one from the cache; only when the cache has no value
   * left is the group's multiset scanned, for the next SIZE: one scan per SIZE retractions of the
   * extreme at worst, instead of one per retraction.
   */
  static final class Extremes {
    static final int SIZE = 32;
    final Comparator<String> order;
    final TreeMap<String, Long> best;
    boolean complete;

    Extremes(ValueType t, boolean max, String[] v) {
      Comparator<String> c = t::compare;
      // Values equal in SQL but written differently (1.0, 1.00) stay apart, as in the multiset.
      order = (max ? c.reversed() : c).thenComparing(Comparator.naturalOrder());
      best = new TreeMap<>(order);
      complete = "1".equals(v[3]);
      String[] flat = v[2] == null ? new String[0] : parseStrings(v[2]);
      for (int i = 0; i + 1 < flat.length; i += 2) {
        best.put(flat[i], Long.parseLong(flat[i + 1]));
      }
    }

    void apply(String x, long w, KeyState st, String prefix) {
      if (complete || (!best.isEmpty() && order.compare(x, best.lastKey()) <= 0)) {
        long c = best.getOrDefault(x, 0L) + w;
        if (c == 0) {
          best.remove(x);
        } else {
          best.put(x, c);
        }
        while (best.size() > SIZE) {
          best.pollLastEntry();
          complete = false;
        }
      }
      if (!complete && first() == null) {
        refill(st, prefix);
      }
    }

    /** The extreme: the best value with a positive count. */
    String first() {
      for (Map.Entry<String, Long> e : best.entrySet()) {
        if (e.getValue() > 0) {
          return e.getKey();
        }
      }
      return null;
    }

    private void refill(KeyState st, String prefix) {
      best.clear();
      long distinct = 0;
      for (Iterator<Map.Entry<String, Long>> it = st.entries(0); it.hasNext(); ) {
        Map.Entry<String, Long> e = it.next();
        if (e.getValue() != 0 && e.getKey().startsWith(prefix)) {
          distinct++;
          best.put(e.getKey().substring(prefix.length()), e.getValue());
          if (best.size() > SIZE) {
            best.pollLastEntry();
          }
        }
      }
      complete = distinct <= SIZE;
    }

    void store(String[] v) {
      v[1] = first();
      String[] flat = new String[best.size() * 2];
      int i = 0;
      for (Map.Entry<String, Long> e : best.entrySet()) {
        flat[i++] = e.getKey();
        flat[i++] = Long.toString(e.getValue());
      }
      v[2] = strings(flat);
      v[3] = complete ? "1" : "0";
    }
  }

  private static String[] outputs(Spec.Op s, Partials p) {
    String[] out = new String[s.aggs.size()];
    for (int j = 0; j < out.length; j++) {
      Spec.Agg a = s.aggs.get(j);
      String[] v = p.p.get(j);
      switch (a.fn) {
        case "count_star":
          out[j] = Long.toString(p.n);
          break;
        case "count":
        case "count_distinct":
          out[j] = v[0];
          break;
        case "sum":
        case "avg":
          out[j] = sumOrAvg(a, v);
          break;
        case "bool_and":
        case "bool_or": {
          long c = Long.parseLong(v[0]);
          long t = v[1] == null ? 0 : Long.parseLong(v[1]);
          out[j] = c == 0 ? null : Boolean.toString(a.fn.equals("bool_and") ? t == c : t > 0);
          break;
        }
        default:
          out[j] = Long.parseLong(v[0]) == 0 ? null : v[1];
      }
    }
    return out;
  }

  private static String sumOrAvg(Spec.Agg a, String[] v) {
    long c = Long.parseLong(v[0]);
    if (c == 0) {
      return null;
    }
    BigDecimal sum = new BigDecimal(v[1]);
    boolean avg = a.fn.equals("avg");
    if (a.type == ValueType.DOUBLE) {
      long nan = Long.parseLong(v[2]);
      long pinf = Long.parseLong(v[3]);
      long ninf = Long.parseLong(v[4]);
      if (nan != 0 || (pinf != 0 && ninf != 0)) {
        return "NaN";
      }
      if (pinf != 0) {
        return "Infinity";
      }
      if (ninf != 0) {
        return "-Infinity";
      }
      // The exact sum rounded once: the same whatever order the values came in.
      return Double.toString(avg ? sum.divide(BigDecimal.valueOf(c), MathContext.DECIMAL128).doubleValue()
                                 : sum.doubleValue());
    }
    if (!avg) {
      return sum.toPlainString();
    }
    return ExactAvg.of(sum, c).toPlainString();  // as ad hoc queries round it
  }

  // ---- top-N per partition -----------------------------------------------------------------

  private static final class Ranked {
    final String row;
    long count;
    final String[] keys;

    Ranked(String row, long count, String[] keys) {
      this.row = row;
      this.count = count;
      this.keys = keys;
    }
  }

  /**
   * The partition's rows with their counts and ORDER BY values, kept by row (one text each), and in
   * the value the best of them in order: the top (OFFSET + LIMIT rows, with multiplicity) and up to
   * {@code s.reserve} more distinct rows, with whether rows outside that cache exist. Every row
   * outside ranks after every cached one, so a batch reads only its changed rows' texts: a changed
   * row that ranks before the cache's last row (or any row, while nothing is outside) goes into the
   * cache, others stay outside. Only when retractions leave the cache short of the top while rows
   * are outside is the whole partition read and sorted again (once per {@code reserve} retracted
   * top rows at worst). Over append-only input nothing can leave the top except by being passed,
   * so rows below it are dropped for good and the cache is the whole stored partition.
   */
  static void topn(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    Map<String, Ranked> changed = new LinkedHashMap<>();
    while (in.hasNext()) {
      Rec r = in.next();
      if (r.w == 0 || r.row == null) {
        continue;
      }
      String stored = st.text(r.row);
      long count = r.w;
      String[] keys;
      if (stored == null) {
        keys = new String[s.order.size()];
        for (int i = 0; i < keys.length; i++) {
          keys[i] = r.arg(s.order.get(i).arg);
        }
      } else {
        String[] parsed = parseStrings(stored);
        count += Long.parseLong(parsed[0]);
        keys = Arrays.copyOfRange(parsed, 1, parsed.length);
      }
      if (count == 0) {
        st.removeText(r.row);
      } else {
        String[] all = new String[keys.length + 1];
        all[0] = Long.toString(count);
        System.arraycopy(keys, 0, all, 1, keys.length);
        st.putText(r.row, strings(all));
      }
      changed.put(r.row, new Ranked(r.row, count, keys));
    }
    if (changed.isEmpty()) {
      return;
    }
    Comparator<Ranked> order = order(s);
    TopCache cache = TopCache.parse(st.value());
    Map<String, Long> before = cache == null ? parseTop(st.value()) : cache.top(s);
    if (cache != null && s.limit >= 0) {
      cache.rows.removeIf(r -> changed.containsKey(r.row));
      // Against the last cached row before any is added: the rows outside rank after it.
      Ranked last = cache.rows.isEmpty() ? null : cache.rows.get(cache.rows.size() - 1);
      boolean added = false;
      for (Ranked c : changed.values()) {
        if (c.count <= 0) {
          continue;
        }
        if (!cache.more || (last != null && order.compare(c, last) < 0)) {
          cache.rows.add(c);
          added = true;
        }  // else after every cached row: it stays outside
      }
      if (added) {
        cache.rows.sort(order);  // sorted runs: near linear
      }
      if (cache.more && !cache.holdsTop(s)) {
        cache = null;  // retractions emptied the top past the reserve: read the partition again
      }
    } else {
      cache = null;  // no cache yet (a new key, the layout before the cache) or no LIMIT
    }
    if (cache == null) {
      cache = new TopCache(new ArrayList<>(), false);
      for (Iterator<Map.Entry<String, String>> it = st.texts(); it.hasNext(); ) {
        Map.Entry<String, String> e = it.next();
        String[] parsed = parseStrings(e.getValue());
        long count = Long.parseLong(parsed[0]);
        if (count > 0) {
          cache.rows.add(new Ranked(e.getKey(), count, Arrays.copyOfRange(parsed, 1, parsed.length)));
        }
      }
      cache.rows.sort(order);
    }
    // Keep the top and, over retracting input, `reserve` rows past it; the rest is outside.
    int keep = cache.topRows(s);
    if (!s.appendOnly) {
      // With ties, the first row past the top too: it shows the rows outside are not peers of the top's last.
      keep = (int) Math.min(cache.rows.size(), (long) keep + s.reserve + (s.ties ? 1 : 0));
    }
    if (keep < cache.rows.size()) {
      List<Ranked> below = cache.rows.subList(keep, cache.rows.size());
      if (s.appendOnly) {
        for (Ranked r : below) {
          st.removeText(r.row);  // below the top over a stream: it can never come back
        }
      } else {
        cache.more = true;
      }
      below.clear();
    }
    Map<String, Long> after = cache.top(s);
    Map<String, Long> diff = new LinkedHashMap<>();
    for (Map.Entry<String, Long> e : before.entrySet()) {
      diff.merge(e.getKey(), -e.getValue(), Long::sum);
    }
    for (Map.Entry<String, Long> e : after.entrySet()) {
      diff.merge(e.getKey(), e.getValue(), Long::sum);
    }
    for (Map.Entry<String, Long> e : diff.entrySet()) {
      if (e.getValue() != 0) {
        out.add(new Rec(s.id, 0, key, e.getKey(), null, null, e.getValue()));
      }
    }
    if (cache.rows.isEmpty() && !cache.more) {
      st.clearValue();
    } else {
      st.setValue(cache.serialize());
    }
  }

  /** A top-N partition's cached best rows, in order, and whether rows outside them exist. */
  private static final class TopCache {
    final List<Ranked> rows;
    boolean more;

    TopCache(List<Ranked> rows, boolean more) {
      this.rows = rows;
      this.more = more;
    }

    /** The cache of a value, or null for none (no value, or the layout before: the top alone). */
    static TopCache parse(String text) {
      if (text == null || !text.startsWith("{")) {
        return null;
      }
      try {
        JsonNode root = JSON.readTree(text);
        List<Ranked> rows = new ArrayList<>();
        for (JsonNode e : root.get("c")) {
          String[] keys = new String[e.size() - 2];
          for (int i = 0; i < keys.length; i++) {
            JsonNode k = e.get(i + 2);
            keys[i] = k.isNull() ? null : k.asText();
          }
          rows.add(new Ranked(e.get(0).asText(), e.get(1).asLong(), keys));
        }
        return new TopCache(rows, root.get("m").asBoolean());
      } catch (Exception e) {
        throw new IllegalStateException("corrupt top-N state: " + e.getMessage(), e);
      }
    }

    String serialize() {
      com.fasterxml.jackson.databind.node.ObjectNode root = JSON.createObjectNode();
      ArrayNode c = root.putArray("c");
      for (Ranked r : rows) {
        ArrayNode e = c.addArray().add(r.row).add(r.count);
        for (String k : r.keys) {
          if (k == null) {
            e.addNull();
          } else {
            e.add(k);
          }
        }
      }
      root.put("m", more);
      return root.toString();
    }

    /** How many of the first rows hold the top: OFFSET + LIMIT of them with multiplicity, or with
     * ties every row whose rank (1 + the rows before its peers) is at most LIMIT. */
    int topRows(Spec.Op s) {
      long needed = s.limit < 0 ? Long.MAX_VALUE : s.offset + s.limit;
      long seen = 0;
      int n = 0;
      if (s.ties) {
        Comparator<Ranked> peers = keyOrder(s);
        long rank = 1;
        while (n < rows.size()) {
          Ranked r = rows.get(n);
          if (n > 0 && peers.compare(rows.get(n - 1), r) != 0) {
            rank = seen + 1;
          }
          if (rank > s.limit) {
            break;
          }
          seen += r.count;
          n++;
        }
        return n;
      }
      while (n < rows.size() && seen < needed) {
        seen += rows.get(n++).count;
      }
      return n;
    }

    /** Whether the cache decides the top though rows outside it exist (they rank after its last row). */
    boolean holdsTop(Spec.Op s) {
      int n = topRows(s);
      if (s.ties) {
        return n < rows.size();  // a cached row past the top: no row outside is a peer of the top's
      }
      long seen = 0;
      for (int i = 0; i < n; i++) {
        seen += rows.get(i).count;
      }
      return seen >= s.offset + s.limit;
    }

    /** The rows OFFSET and LIMIT select (with ties, every row ranked within LIMIT), with their
     * multiplicities in the top. */
    Map<String, Long> top(Spec.Op s) {
      Map<String, Long> top = new LinkedHashMap<>();
      if (s.ties) {
        int n = topRows(s);
        for (int i = 0; i < n; i++) {
          top.put(rows.get(i).row, rows.get(i).count);
        }
        return top;
      }
      long skip = s.offset;
      long take = s.limit < 0 ? Long.MAX_VALUE : s.limit;
      for (Ranked r : rows) {
        if (take == 0) {
          break;
        }
        long skipped = Math.min(skip, r.count);
        skip -= skipped;
        long taken = Math.min(take, r.count - skipped);
        take -= taken;
        if (taken > 0) {
          top.put(r.row, taken);
        }
      }
      return top;
    }
  }

  private static Comparator<Ranked> order(Spec.Op s) {
    Comparator<Ranked> keys = keyOrder(s);
    return (x, y) -> {
      int c = keys.compare(x, y);
      return c != 0 ? c : ValueType.compareCodePoints(x.row, y.row);  // ties: a deterministic order
    };
  }

  /** The ORDER BY alone: rows it finds equal are peers (they share a RANK()). */
  private static Comparator<Ranked> keyOrder(Spec.Op s) {
    return (x, y) -> {
      for (int i = 0; i < s.order.size(); i++) {
        Spec.SortKey k = s.order.get(i);
        String a = x.keys[i];
        String b = y.keys[i];
        int c;
        if (a == null || b == null) {
          c = a == null && b == null ? 0 : (a == null) == k.nullsFirst ? -1 : 1;
        } else {
          c = k.type.compare(a, b);
          if (k.desc) {
            c = -c;
          }
        }
        if (c != 0) {
          return c;
        }
      }
      return 0;
    };
  }

  private static Map<String, Long> parseTop(String text) {
    Map<String, Long> m = new LinkedHashMap<>();
    if (text == null) {
      return m;
    }
    try {
      for (JsonNode e : JSON.readTree(text)) {
        m.put(e.get(0).asText(), e.get(1).asLong());
      }
    } catch (Exception e) {
      throw new IllegalStateException("corrupt top-N state: " + e.getMessage(), e);
    }
    return m;
  }

  private static String serializeTop(Map<String, Long> top) {
    ArrayNode root = JSON.createArrayNode();
    for (Map.Entry<String, Long> e : top.entrySet()) {
      root.addArray().add(e.getKey()).add(e.getValue());
    }
    return root.toString();
  }

  static String strings(String[] values) {
    ArrayNode a = JSON.createArrayNode();
    for (String v : values) {
      if (v == null) {
        a.addNull();
      } else {
        a.add(v);
      }
    }
    return a.toString();
  }

  static String[] parseStrings(String text) {
    try {
      JsonNode node = JSON.readTree(text);
      String[] out = new String[node.size()];
      for (int i = 0; i < out.length; i++) {
        out[i] = node.get(i).isNull() ? null : node.get(i).asText();
      }
      return out;
    } catch (Exception e) {
      throw new IllegalStateException("corrupt state: " + e.getMessage(), e);
    }
  }

  // ---- session: session windows per partition ---------------------------------------------

  /** A row of a session partition: its JSON text, count and time (micros; null for a NULL time). */
  private static final class Timed {
    final String row;
    final long count;
    final Long ts;

    Timed(String row, long count, Long ts) {
      this.row = row;
      this.count = count;
      this.ts = ts;
    }
  }

  // A session partition's state: its timed rows in buckets of time one gap wide ("b" + bucket:
  // [row, count, time, ...]), its untimed rows one per text ("n" + row: count), and the value
  // "buckets:<number of those texts>" (so the key's state goes when its last row does).
  private static final String SESSION_BUCKETS = "buckets:";
  private static final String BUCKET = "b";
  private static final String UNTIMED = "n";

  /**
   * A batch that touches the partition emits the difference its changes make to the rows'
   * sessions: each row with its session's bounds appended (a session is a run of rows whose
   * times, in order, are at most the gap apart; start = the first time, end = the last plus the
   * gap; a NULL time is a session of its own with NULL bounds). Only sessions within the gap of a
   * changed row's time can change (an added row joins or bridges the sessions it is within the
   * gap of; a removed one was in its session's span, and each piece it leaves ends within the gap
   * of it), so only their rows are emitted, before (retracted) and after.
   *
   * <p>The rows are kept in buckets of time as wide as the gap, so a batch reads only the sessions
   * around its changes, not the whole partition: two rows on either side of an empty bucket are
   * more than the gap apart, so an empty bucket ends every session. From the bucket of each
   * changed time, the buckets are read outwards until an empty one (that is not itself a changed
   * row's); the rows between are every row of the sessions the changes touch, before and after.
   * Cost: those sessions' rows, and rewriting the buckets of the changed rows.
   */
  static void session(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    Map<String, Long> delta = new LinkedHashMap<>();
    Map<String, Long> timeOf = new HashMap<>();  // a row's time is in the row: one per row
    while (in.hasNext()) {
      Rec r = in.next();
      if (r.w != 0 && r.row != null) {
        delta.merge(r.row, r.w, Long::sum);
        timeOf.computeIfAbsent(r.row, row -> r.arg(0) == null ? null : Long.parseLong(r.arg(0)));
      }
    }
    delta.values().removeIf(w -> w == 0);
    if (delta.isEmpty()) {
      return;
    }
    String marker = st.value();
    long entries = marker != null && marker.startsWith(SESSION_BUCKETS)
        ? Long.parseLong(marker.substring(SESSION_BUCKETS.length())) : sessionToBuckets(s, st);
    Map<String, Long> diff = new HashMap<>();
    List<Long> changedTimes = new ArrayList<>();
    TreeSet<Long> seeds = new TreeSet<>();  // the changed rows' buckets
    for (Map.Entry<String, Long> e : delta.entrySet()) {
      String row = e.getKey();
      Long ts = timeOf.get(row);
      if (ts == null) {  // a session of its own
        String old = st.text(UNTIMED + row);
        long before = old == null ? 0 : Long.parseLong(old);
        long after = before + e.getValue();
        if (before > 0) {
          diff.merge(withBounds(s, row, null, null), -before, Long::sum);
        }
        if (after > 0) {
          diff.merge(withBounds(s, row, null, null), after, Long::sum);
        }
        if (after == 0) {
          st.removeText(UNTIMED + row);
          entries -= old == null ? 0 : 1;
        } else {
          st.putText(UNTIMED + row, Long.toString(after));
          entries += old == null ? 1 : 0;
        }
      } else {
        changedTimes.add(ts);
        seeds.add(bucketOf(s, ts));
      }
    }
    if (!seeds.isEmpty()) {
      Map<Long, List<Timed>> buckets = new HashMap<>();  // read so far; empty lists for empty buckets
      long reached = Long.MIN_VALUE;  // the right end (an empty bucket) of the buckets read so far
      for (long seed : seeds) {
        if (seed <= reached) {
          continue;  // read with an earlier seed's sessions
        }
        readBucket(st, seed, buckets);
        for (long k = seed - 1; k > reached && (!readBucket(st, k, buckets).isEmpty() || seeds.contains(k)); k--) {
          // outwards to the left, to an empty bucket
        }
        long k = seed + 1;
        while (!readBucket(st, k, buckets).isEmpty() || seeds.contains(k)) {
          k++;
        }
        reached = k;
      }
      Map<String, Timed> rows = new HashMap<>();
      for (List<Timed> bucket : buckets.values()) {
        for (Timed t : bucket) {
          rows.put(t.row, t);
        }
      }
      long[] times = changedTimes.stream().mapToLong(Long::longValue).sorted().toArray();
      changedSessions(s, rows.values(), times, -1, diff);
      for (Map.Entry<String, Long> e : delta.entrySet()) {
        Long ts = timeOf.get(e.getKey());
        if (ts == null) {
          continue;
        }
        Timed old = rows.get(e.getKey());
        long count = (old == null ? 0 : old.count) + e.getValue();
        if (count == 0) {
          rows.remove(e.getKey());
        } else {
          rows.put(e.getKey(), new Timed(e.getKey(), count, ts));
        }
      }
      changedSessions(s, rows.values(), times, 1, diff);
      Map<Long, List<Timed>> rewritten = new HashMap<>();
      for (long seed : seeds) {
        rewritten.put(seed, new ArrayList<>());
      }
      for (Timed t : rows.values()) {
        List<Timed> bucket = rewritten.get(bucketOf(s, t.ts));
        if (bucket != null) {
          bucket.add(t);
        }
      }
      for (Map.Entry<Long, List<Timed>> e : rewritten.entrySet()) {
        entries += (e.getValue().isEmpty() ? 0 : 1) - (buckets.get(e.getKey()).isEmpty() ? 0 : 1);
        writeBucket(st, e.getKey(), e.getValue());
      }
    }
    String now = entries == 0 ? null : SESSION_BUCKETS + entries;
    if (!Objects.equals(now, marker)) {
      if (now == null) {
        st.clearValue();
      } else {
        st.setValue(now);
      }
    }
    for (Map.Entry<String, Long> e : diff.entrySet()) {
      if (e.getValue() != 0) {
        out.add(new Rec(s.id, 0, key, e.getKey(), null, null, e.getValue()));
      }
    }
  }

  /** The bucket of time `ts` (one gap wide; a gap of 0 gives buckets of one microsecond). */
  private static long bucketOf(Spec.Op s, long ts) {
    return Math.floorDiv(ts, Math.max(s.gapMicros, 1));
  }

  /** Bucket `k`'s rows, read once per batch into `read`. */
  private static List<Timed> readBucket(KeyState st, long k, Map<Long, List<Timed>> read) {
    return read.computeIfAbsent(k, b -> {
      String text = st.text(BUCKET + b);
      List<Timed> rows = new ArrayList<>();
      if (text != null) {
        String[] f = parseStrings(text);
        for (int i = 0; i + 2 < f.length; i += 3) {
          rows.add(new Timed(f[i], Long.parseLong(f[i + 1]), Long.parseLong(f[i + 2])));
        }
      }
      return rows;
    });
  }

  private static void writeBucket(KeyState st, long k, List<Timed> rows) {
    if (rows.isEmpty()) {
      st.removeText(BUCKET + k);
      return;
    }
    rows.sort(Comparator.comparingLong((Timed t) -> t.ts).thenComparing(t -> t.row));
    String[] f = new String[rows.size() * 3];
    for (int i = 0; i < rows.size(); i++) {
      Timed t = rows.get(i);
      f[3 * i] = t.row;
      f[3 * i + 1] = Long.toString(t.count);
      f[3 * i + 2] = t.ts.toString();
    }
    st.putText(BUCKET + k, strings(f));
  }

  /**
   * A partition kept one row per text (row -> [count, time]), as before the buckets, rewritten
   * into them once. Returns the number of texts it now holds (none for a new partition).
   */
  private static long sessionToBuckets(Spec.Op s, KeyState st) {
    Map<String, String> old = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, String>> it = st.texts(); it.hasNext(); ) {
      Map.Entry<String, String> e = it.next();
      old.put(e.getKey(), e.getValue());
    }
    Map<Long, List<Timed>> buckets = new HashMap<>();
    long untimed = 0;
    for (Map.Entry<String, String> e : old.entrySet()) {
      st.removeText(e.getKey());
      String[] parsed = parseStrings(e.getValue());
      if (parsed[1] == null) {
        st.putText(UNTIMED + e.getKey(), parsed[0]);
        untimed++;
      } else {
        long ts = Long.parseLong(parsed[1]);
        buckets.computeIfAbsent(bucketOf(s, ts), b -> new ArrayList<>())
            .add(new Timed(e.getKey(), Long.parseLong(parsed[0]), ts));
      }
    }
    buckets.forEach((k, rows) -> writeBucket(st, k, rows));
    return buckets.size() + untimed;
  }

  /**
   * Adds each timed row (count > 0) of the sessions within the gap of a time in `times` (sorted)
   * with its session's bounds to `acc`, times `sign`.
   */
  private static void changedSessions(Spec.Op s, Collection<Timed> rows, long[] times, long sign,
                                      Map<String, Long> acc) {
    List<Timed> timed = new ArrayList<>();
    for (Timed t : rows) {
      if (t.count > 0 && t.ts != null) {
        timed.add(t);
      }
    }
    timed.sort(Comparator.comparingLong((Timed t) -> t.ts));
    int i = 0;
    while (i < timed.size()) {
      int j = i + 1;
      while (j < timed.size() && timed.get(j).ts - timed.get(j - 1).ts <= s.gapMicros) {
        j++;
      }
      long first = timed.get(i).ts;
      long last = timed.get(j - 1).ts;
      if (anyWithin(times, first - s.gapMicros, last + s.gapMicros)) {
        Long end = last + s.gapMicros;
        for (int x = i; x < j; x++) {
          acc.merge(withBounds(s, timed.get(x).row, first, end), sign * timed.get(x).count, Long::sum);
        }
      }
      i = j;
    }
  }

  /** Whether a value of `sorted` lies in [lo, hi]. */
  private static boolean anyWithin(long[] sorted, long lo, long hi) {
    int at = java.util.Arrays.binarySearch(sorted, lo);
    int from = at >= 0 ? at : -at - 1;
    return from < sorted.length && sorted[from] <= hi;
  }

  /** A row's JSON object with the session's bounds as two more fields (micros, as rows carry times). */
  static String withBounds(Spec.Op s, String row, Long start, Long end) {
    StringBuilder b = new StringBuilder(row.length() + 48);
    String body = row.substring(0, row.lastIndexOf('}'));
    b.append(body);
    if (!body.trim().equals("{")) {
      b.append(',');
    }
    b.append(s.startKey).append(start == null ? "null" : start.toString());
    b.append(',').append(s.endKey).append(end == null ? "null" : end.toString()).append('}');
    return b.toString();
  }

  // ---- arrange: a partition's old and new contents, for queries recomputed per partition ----

  static void arrange(Spec.Op s, String key, Iterator<Rec> in, KeyState st, List<Rec> out) {
    List<Rec> changes = new ArrayList<>();
    while (in.hasNext()) {
      Rec r = in.next();
      if (r.w != 0 && r.row != null) {
        changes.add(r);
      }
    }
    if (st.value() == null) {
      // A partition seen for the first time: its old result is nothing, not the query over no rows
      // (which, for a global aggregate, is a row).
      out.add(new Rec(s.id, 2, key, null, null, null, 1));
      st.setValue("1");
    }
    if (changes.isEmpty()) {
      return;
    }
    Map<String, Long> contents = new HashMap<>();
    for (Iterator<Map.Entry<String, Long>> it = st.entries(0); it.hasNext(); ) {
      Map.Entry<String, Long> e = it.next();
      contents.put(e.getKey(), e.getValue());
      if (e.getValue() > 0) {
        out.add(new Rec(s.id, 0, key, e.getKey(), null, null, e.getValue()));
      }
    }
    for (Rec r : changes) {
      long n = st.add(0, r.row, r.w);
      if (n == 0) {
        contents.remove(r.row);
      } else {
        contents.put(r.row, n);
      }
    }
    for (Map.Entry<String, Long> e : contents.entrySet()) {
      if (e.getValue() > 0) {
        out.add(new Rec(s.id, 1, key, e.getKey(), null, null, e.getValue()));
      }
    }
  }

  static long[] longs(String text, int n) {
    long[] out = new long[n];
    if (text != null) {
      String[] parts = text.split(",");
      for (int i = 0; i < n && i < parts.length; i++) {
        out[i] = Long.parseLong(parts[i]);
      }
    }
    return out;
  }

  static boolean same(String a, String b) {
    return Objects.equals(a, b);
  }
}
