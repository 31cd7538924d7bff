package streamdb.spark;

import java.math.BigDecimal;

/**
 * Map-side partial aggregation (Flink's local-global aggregation, Spark's partial aggregate):
 * before a layer's shuffle, a task sums the records of one REDUCE group into one record carrying
 * the group's partials for this batch, so what is shuffled and applied per batch is one record
 * per (task, group), not one per change. Only aggregates whose partials add up are summed: counts,
 * exact sums and averages (BigDecimal, so the order of addition changes nothing), bool_and/or, and
 * min/max over input that never retracts. An operator with any other aggregate (count(DISTINCT),
 * min/max over a table) keeps its records, netted by value in the Combiner.
 *
 * <p>Encoded in a record's `a` (side SIDE, weight: the sum of the changes' weights), per aggregate
 * in the operator's order: count_star nothing; count [non-null count]; sum/avg [count, sum, NaN,
 * +Infinity, -Infinity counts]; bool_and/or [count, trues]; min/max [count, best value or null].
 */
final class PartialAgg {
  /** The side of a record that carries partials rather than one change. */
  static final int SIDE = -1;

  private final Spec.Op op;
  long n;
  private final long[] count;
  private final BigDecimal[] sum;
  private final long[][] special;  // NaN, +Infinity, -Infinity (double sums)
  private final long[] trues;
  private final String[] best;

  PartialAgg(Spec.Op op) {
    this.op = op;
    int m = op.aggs.size();
    count = new long[m];
    sum = new BigDecimal[m];
    special = new long[m][3];
    trues = new long[m];
    best = new String[m];
  }

  /** Whether every aggregate of `s` has partials that add up. */
  static boolean mergeable(Spec.Op s) {
    if (s == null || s.kind != Spec.Kind.REDUCE) {
      return false;
    }
    for (Spec.Agg a : s.aggs) {
      switch (a.fn) {
        case "count_star":
        case "count":
        case "sum":
        case "avg":
        case "bool_and":
        case "bool_or":
          break;
        case "min":
        case "max":
          if (!s.appendOnly) {
            return false;
          }
          break;
        default:
          return false;
      }
    }
    return true;
  }

  private static int width(Spec.Agg a) {
    switch (a.fn) {
      case "count_star":
        return 0;
      case "count":
        return 1;
      case "sum":
      case "avg":
        return 5;
      default:
        return 2;
    }
  }

  /** Adds one change: its argument values and weight. */
  void add(String[] args, long w) {
    n += w;
    for (int j = 0; j < op.aggs.size(); j++) {
      Spec.Agg a = op.aggs.get(j);
      String x = a.arg < 0 || args == null || a.arg >= args.length ? null : args[a.arg];
      if (a.fn.equals("count_star") || x == null) {
        continue;
      }
      count[j] += w;
      switch (a.fn) {
        case "sum":
        case "avg": {
          BigDecimal weight = BigDecimal.valueOf(w);
          BigDecimal value;
          if (a.type == ValueType.DOUBLE) {
            double d = Double.parseDouble(x);
            if (Double.isNaN(d) || Double.isInfinite(d)) {
              special[j][Double.isNaN(d) ? 0 : d > 0 ? 1 : 2] += w;
              continue;
            }
            value = new BigDecimal(d);
          } else {
            value = new BigDecimal(x);
          }
          BigDecimal term = value.multiply(weight);
          sum[j] = sum[j] == null ? term : sum[j].add(term);
          break;
        }
        case "bool_and":
        case "bool_or":
          if (Boolean.parseBoolean(x)) {
            trues[j] += w;
          }
          break;
        case "min":
        case "max":
          if (w > 0 && (best[j] == null || Operators.better(a.type, a.fn.equals("max"), x, best[j]))) {
            best[j] = x;
          }
          break;
        default:
          break;
      }
    }
  }

  /** Nothing to apply: every change netted out. */
  boolean isZero() {
    if (n != 0) {
      return false;
    }
    for (int j = 0; j < count.length; j++) {
      if (count[j] != 0 || trues[j] != 0 || best[j] != null || (sum[j] != null && sum[j].signum() != 0)
          || special[j][0] != 0 || special[j][1] != 0 || special[j][2] != 0) {
        return false;
      }
    }
    return true;
  }

  String[] encode() {
    int size = 0;
    for (Spec.Agg a : op.aggs) {
      size += width(a);
    }
    String[] out = new String[size];
    int o = 0;
    for (int j = 0; j < op.aggs.size(); j++) {
      Spec.Agg a = op.aggs.get(j);
      switch (a.fn) {
        case "count_star":
          break;
        case "count":
          out[o] = Long.toString(count[j]);
          break;
        case "sum":
        case "avg":
          out[o] = Long.toString(count[j]);
          // Scale as the change-by-change sum would have it (an empty sum is "0").
          out[o + 1] = sum[j] == null ? "0" : sum[j].toPlainString();
          out[o + 2] = Long.toString(special[j][0]);
          out[o + 3] = Long.toString(special[j][1]);
          out[o + 4] = Long.toString(special[j][2]);
          break;
        case "bool_and":
        case "bool_or":
          out[o] = Long.toString(count[j]);
          out[o + 1] = Long.toString(trues[j]);
          break;
        default:
          out[o] = Long.toString(count[j]);
          out[o + 1] = best[j];
      }
      o += width(a);
    }
    return out;
  }

  /** Adds an encoded partial record's values into a group's partials (Operators.Partials.p). */
  static void merge(Spec.Op s, String[] enc, java.util.List<String[]> partials) {
    int o = 0;
    for (int j = 0; j < s.aggs.size(); j++) {
      Spec.Agg a = s.aggs.get(j);
      String[] v = partials.get(j);
      switch (a.fn) {
        case "count_star":
          break;
        case "count":
          v[0] = plus(v[0], enc[o]);
          break;
        case "sum":
        case "avg":
          v[0] = plus(v[0], enc[o]);
          v[1] = new BigDecimal(v[1]).add(new BigDecimal(enc[o + 1])).toPlainString();
          for (int i = 2; i <= 4; i++) {
            v[i] = plus(v[i], enc[o + i]);
          }
          break;
        case "bool_and":
        case "bool_or":
          v[0] = plus(v[0], enc[o]);
          if (!"0".equals(enc[o + 1])) {
            v[1] = plus(v[1] == null ? "0" : v[1], enc[o + 1]);
          }
          break;
        default: {  // min/max over input that never retracts
          v[0] = plus(v[0], enc[o]);
          String b = enc[o + 1];
          if (b != null && (v[1] == null || Operators.better(a.type, a.fn.equals("max"), b, v[1]))) {
            v[1] = b;
          }
        }
      }
      o += width(a);
    }
  }

  private static String plus(String a, String b) {
    return Long.toString(Long.parseLong(a) + Long.parseLong(b));
  }
}
