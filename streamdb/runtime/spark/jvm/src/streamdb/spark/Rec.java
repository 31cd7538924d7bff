package streamdb.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * One change record between layers (see Layers.RECORD): the operator instance it goes to (or comes
 * from), a side or generation, the grouping key, one or two rows as JSON text, argument or result
 * values as text, and the weight (+n inserted, -n retracted).
 */
public final class Rec {
  public final int op;
  public final int side;
  public final String k;
  public final String row;
  public final String row2;
  public final String[] a;
  public final long w;

  public Rec(int op, int side, String k, String row, String row2, String[] a, long w) {
    this.op = op;
    this.side = side;
    this.k = k;
    this.row = row;
    this.row2 = row2;
    this.a = a;
    this.w = w;
  }

  public static Rec of(Row r) {
    String[] a = null;
    if (!r.isNullAt(5)) {
      List<Object> list = r.getList(5);
      a = new String[list.size()];
      for (int i = 0; i < a.length; i++) {
        a[i] = (String) list.get(i);
      }
    }
    return new Rec(r.getInt(0), r.isNullAt(1) ? 0 : r.getInt(1), r.isNullAt(2) ? "" : r.getString(2),
                   r.isNullAt(3) ? null : r.getString(3), r.isNullAt(4) ? null : r.getString(4), a,
                   r.getLong(6));
  }

  public Row toRow() {
    // The Row encoder takes arrays as Scala sequences.
    return RowFactory.create(op, side, k, row, row2,
        a == null ? null : scala.jdk.javaapi.CollectionConverters.asScala(Arrays.asList(a)), w);
  }

  public String arg(int i) {
    return a == null || i < 0 || i >= a.length ? null : a[i];
  }

  @Override
  public String toString() {
    return "Rec(" + op + "," + side + "," + k + "," + row + "," + row2 + ","
        + (a == null ? "null" : new ArrayList<>(Arrays.asList(a))) + "," + w + ")";
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Rec)) {
      return false;
    }
    Rec r = (Rec) o;
    return op == r.op && side == r.side && w == r.w && Objects.equals(k, r.k) && Objects.equals(row, r.row)
        && Objects.equals(row2, r.row2) && Arrays.equals(a, r.a);
  }

  @Override
  public int hashCode() {
    return Objects.hash(op, side, k, row, row2, Arrays.hashCode(a), w);
  }
}
