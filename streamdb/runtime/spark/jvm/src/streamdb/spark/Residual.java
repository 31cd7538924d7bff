package streamdb.spark;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The comparisons an inner join tests on each pair it would emit (dataflow.fuse_residuals), over
 * the two sides' rows as JSON: a pair is emitted only if every comparison is true (NULL is not).
 * Values compare as ValueType does (the aggregates' and top-N's order): numbers by value,
 * timestamps and dates as the integers their rows carry, text by code point, NaN equal to itself
 * and above every double.
 */
final class Residual implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON =
      new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

  /** A column of one side (plus a constant, for a timestamp minus an interval), or a literal. */
  record Operand(int side, String field, long add, String literal) implements Serializable {}

  /** `left op right`, op one of eq, ne, lt, le, gt, ge. */
  record Cond(String op, ValueType type, Operand left, Operand right) implements Serializable {}

  private final List<Cond> conds;

  private Residual(List<Cond> conds) {
    this.conds = conds;
  }

  static Residual parse(JsonNode spec) {
    if (spec == null || !spec.isArray() || spec.size() == 0) {
      return null;
    }
    List<Cond> conds = new ArrayList<>();
    for (JsonNode c : spec) {
      conds.add(new Cond(c.path("op").asText(), ValueType.of(c.path("type").asText()), operand(c.path("l")),
                         operand(c.path("r"))));
    }
    return new Residual(conds);
  }

  private static Operand operand(JsonNode o) {
    if (o.has("lit")) {
      return new Operand(-1, null, 0, o.path("lit").asText());
    }
    return new Operand(o.path("side").asInt(), o.path("field").asText(), o.path("add").asLong(0), null);
  }

  /** The rows of one batch, parsed once each. */
  static final class Rows {
    private final Map<String, JsonNode> parsed = new HashMap<>();

    JsonNode of(String row) {
      return parsed.computeIfAbsent(row, r -> {
        try {
          return JSON.readTree(r);
        } catch (Exception e) {
          throw new IllegalStateException("a join row that is not JSON: " + e.getMessage(), e);
        }
      });
    }
  }

  boolean test(String left, String right, Rows rows) {
    JsonNode l = rows.of(left);
    JsonNode r = rows.of(right);
    for (Cond c : conds) {
      String a = text(c.left(), l, r);
      String b = text(c.right(), l, r);
      if (a == null || b == null || !holds(c.op(), c.type().compare(a, b))) {
        return false;
      }
    }
    return true;
  }

  private static boolean holds(String op, int cmp) {
    switch (op) {
      case "eq":
        return cmp == 0;
      case "ne":
        return cmp != 0;
      case "lt":
        return cmp < 0;
      case "le":
        return cmp <= 0;
      case "gt":
        return cmp > 0;
      case "ge":
        return cmp >= 0;
      default:
        throw new IllegalArgumentException("a join comparison " + op);
    }
  }

  /** The operand's value as ValueType reads it (NaN and Infinity are text in the row JSON). */
  private static String text(Operand o, JsonNode left, JsonNode right) {
    if (o.side() < 0) {
      return o.literal();
    }
    JsonNode n = (o.side() == 0 ? left : right).get(o.field());
    if (n == null || n.isNull()) {
      return null;
    }
    return o.add() == 0 ? n.asText() : Long.toString(Math.addExact(n.longValue(), o.add()));
  }
}
