package streamdb.spark;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The comparisons an inner join tests on each pair it would emit (dataflow.fuse_residuals), over
 * the two sides' rows as JSON: a pair is emitted only if every comparison is true (NULL is not).
 * Values compare as the view's filter would in Spark: numbers by value, timestamps and dates as
 * the integers their rows carry, text by code point, NaN equal to itself and above every double.
 */
final class Residual implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON =
      new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

  /** A column of one side (plus a constant, for a timestamp minus an interval), or a literal. */
  static final class Operand implements Serializable {
    private static final long serialVersionUID = 1L;
    final int side;  // 0 or 1; -1 for a literal
    final String field;
    final long add;
    final String literal;

    Operand(int side, String field, long add, String literal) {
      this.side = side;
      this.field = field;
      this.add = add;
      this.literal = literal;
    }
  }

  static final class Cond implements Serializable {
    private static final long serialVersionUID = 1L;
    final String op;  // eq, ne, lt, le, gt, ge
    final ValueType type;
    final Operand left;
    final Operand right;

    Cond(String op, ValueType type, Operand left, Operand right) {
      this.op = op;
      this.type = type;
      this.left = left;
      this.right = right;
    }
  }

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
      Comparable<Object> a = value(c.type, c.left, l, r);
      Comparable<Object> b = value(c.type, c.right, l, r);
      if (a == null || b == null) {
        return false;
      }
      int cmp = a.compareTo(b);
      boolean ok;
      switch (c.op) {
        case "eq":
          ok = cmp == 0;
          break;
        case "ne":
          ok = cmp != 0;
          break;
        case "lt":
          ok = cmp < 0;
          break;
        case "le":
          ok = cmp <= 0;
          break;
        case "gt":
          ok = cmp > 0;
          break;
        case "ge":
          ok = cmp >= 0;
          break;
        default:
          throw new IllegalArgumentException("a join comparison " + c.op);
      }
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  @SuppressWarnings("unchecked")
  private static Comparable<Object> value(ValueType type, Operand o, JsonNode left, JsonNode right) {
    Object v;
    if (o.side < 0) {
      v = literal(type, o.literal);
    } else {
      JsonNode n = (o.side == 0 ? left : right).get(o.field);
      v = n == null || n.isNull() ? null : value(type, n, o.add);
    }
    return (Comparable<Object>) v;
  }

  private static Object literal(ValueType type, String text) {
    switch (type) {
      case LONG:
        return Long.parseLong(text);
      case DECIMAL:
        return new BigDecimal(text);
      case DOUBLE:
        return new SqlDouble(Double.parseDouble(text));
      case BOOL:
        return Boolean.parseBoolean(text);
      default:
        return new CodePoints(text);
    }
  }

  private static Object value(ValueType type, JsonNode n, long add) {
    switch (type) {
      case LONG:
        return Math.addExact(n.longValue(), add);
      case DECIMAL:
        return n.isIntegralNumber() ? new BigDecimal(n.bigIntegerValue()) : n.decimalValue();
      case DOUBLE:
        return new SqlDouble(n.isTextual() ? Double.parseDouble(n.textValue()) : n.doubleValue());
      case BOOL:
        return n.booleanValue();
      default:
        return new CodePoints(n.asText());
    }
  }

  /** A double in SQL order: NaN equals itself and is above every other value; -0.0 equals 0.0. */
  private static final class SqlDouble implements Comparable<SqlDouble> {
    final double v;

    SqlDouble(double v) {
      this.v = v;
    }

    @Override
    public int compareTo(SqlDouble o) {
      return v == o.v ? 0 : Double.compare(v, o.v);
    }
  }

  /** Text in Spark's order (UTF-8 bytes, i.e. code points). */
  private static final class CodePoints implements Comparable<CodePoints> {
    final String s;

    CodePoints(String s) {
      this.s = s;
    }

    @Override
    public int compareTo(CodePoints o) {
      return ValueType.compareCodePoints(s, o.s);
    }
  }
}
