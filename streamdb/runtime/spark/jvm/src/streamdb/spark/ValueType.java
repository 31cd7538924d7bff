package streamdb.spark;

import java.math.BigDecimal;

/**
 * How an argument value travels (as text) and compares. Timestamps and dates travel as integers
 * (microseconds, days) so they compare as numbers; strings compare by code point, as Spark's
 * UTF-8 binary order does.
 */
public enum ValueType {
  LONG, DOUBLE, DECIMAL, STRING, BOOL;

  public static ValueType of(String name) {
    return ValueType.valueOf(name.toUpperCase());
  }

  /** Compares two non-null values of this type in SQL order (NaN above every other double). */
  public int compare(String a, String b) {
    switch (this) {
      case LONG:
        return Long.compare(Long.parseLong(a), Long.parseLong(b));
      case DOUBLE: {
        double x = Double.parseDouble(a);
        double y = Double.parseDouble(b);
        if (x == y) {
          return 0;  // -0.0 equals 0.0 in SQL
        }
        return Double.compare(x, y);
      }
      case DECIMAL:
        return new BigDecimal(a).compareTo(new BigDecimal(b));
      case BOOL:
        return Boolean.compare(Boolean.parseBoolean(a), Boolean.parseBoolean(b));
      default:
        return compareCodePoints(a, b);
    }
  }

  static int compareCodePoints(String a, String b) {
    int i = 0;
    int j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i);
      int y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }
}
