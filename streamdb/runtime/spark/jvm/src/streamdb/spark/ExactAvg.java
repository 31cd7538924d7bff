package streamdb.spark;

import java.math.BigDecimal;
import java.math.RoundingMode;
import org.apache.spark.sql.api.java.UDF2;

/**
 * avg() of integers and numerics as the embedded engine and the views compute it: the exact sum
 * over the count, rounded half away from zero to SCALE decimals (Postgres rounds so). Spark's own
 * avg is a double for integers and has 4 more decimals than its argument for decimals, so an ad
 * hoc query read through Spark printed another number than the same query through DuckDB.
 * Registered as sdb_exact_avg(sum(x), count(x)) by the Spark session.
 */
public final class ExactAvg implements UDF2<BigDecimal, Long, BigDecimal> {
  /** Decimals of an exact average (planner/typing.py's _AVG_SCALE). */
  public static final int SCALE = 16;

  @Override
  public BigDecimal call(BigDecimal sum, Long count) {
    if (sum == null || count == null || count == 0) {
      return null;
    }
    return of(sum, count);
  }

  static BigDecimal of(BigDecimal sum, long count) {
    return sum.divide(BigDecimal.valueOf(count), Math.max(SCALE, sum.scale()), RoundingMode.HALF_UP);
  }
}
