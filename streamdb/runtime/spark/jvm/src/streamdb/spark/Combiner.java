package streamdb.spark;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Objects;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * A map-side combiner before a layer's shuffle: records without rows (a Reduce's input: key and
 * aggregate arguments only) that are equal but for their weight are netted into one, within a
 * task's partition. Every operator reads its input as a multiset of changes, so this changes no
 * result; it cuts what is shuffled and applied when many changes hit the same group (a count per
 * auction and window in Nexmark q5: five window records per bid). Records with rows (joins, top-N,
 * pass-through) and weight-0 records (seeds of global aggregates) go through untouched. The records
 * of a REDUCE whose aggregates all add up (PartialAgg.mergeable) are summed further, into one
 * partial record per group. At most MAX_GROUPS groups are held; then they are flushed, so memory
 * stays bounded.
 */
final class Combiner implements Iterator<Row> {
  static final int MAX_GROUPS = 50_000;
  private final Iterator<Row> in;
  private final int maxGroups;
  private final Spec spec;
  private final Map<Key, long[]> groups = new LinkedHashMap<>();
  private final Map<Key, PartialAgg> partials = new LinkedHashMap<>();
  private final Map<Integer, Boolean> mergeable = new HashMap<>();
  private final ArrayDeque<Row> ready = new ArrayDeque<>();

  Combiner(Iterator<Row> in, Spec spec) {
    this(in, spec, MAX_GROUPS);
  }

  Combiner(Iterator<Row> in, Spec spec, int maxGroups) {
    this.in = in;
    this.spec = spec;
    this.maxGroups = maxGroups;
  }

  @Override
  public boolean hasNext() {
    while (ready.isEmpty()) {
      if (!in.hasNext()) {
        if (groups.isEmpty() && partials.isEmpty()) {
          return false;
        }
        flush();
        continue;
      }
      Row r = in.next();
      long w = r.getLong(6);
      if (w == 0 || !r.isNullAt(3) || !r.isNullAt(4)) {
        ready.add(r);
        continue;
      }
      int op = r.getInt(0);
      if ((r.isNullAt(1) || r.getInt(1) == 0)
          && mergeable.computeIfAbsent(op, id -> PartialAgg.mergeable(spec.op(id)))) {
        Key group = new Key(op, null, r.getString(2), null);
        PartialAgg p = partials.get(group);
        if (p == null) {
          if (groups.size() + partials.size() >= maxGroups) {
            flush();
          }
          p = new PartialAgg(spec.op(op));
          partials.put(group, p);
        }
        p.add(r.isNullAt(5) ? null : r.<String>getList(5).toArray(new String[0]), w);
        continue;
      }
      Key key = new Key(op, r.isNullAt(1) ? null : r.getInt(1), r.getString(2),
                        r.isNullAt(5) ? null : r.<String>getList(5).toArray(new String[0]));
      long[] sum = groups.get(key);
      if (sum == null) {
        if (groups.size() + partials.size() >= maxGroups) {
          flush();
        }
        groups.put(key, new long[] {w});
      } else {
        sum[0] += w;
      }
    }
    return true;
  }

  @Override
  public Row next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    return ready.poll();
  }

  private void flush() {
    for (Map.Entry<Key, long[]> e : groups.entrySet()) {
      long w = e.getValue()[0];
      if (w != 0) {
        Key k = e.getKey();
        ready.add(RowFactory.create(k.op, k.side, k.k, null, null,
            k.args == null ? null : scala.jdk.javaapi.CollectionConverters.asScala(Arrays.asList(k.args)), w));
      }
    }
    groups.clear();
    for (Map.Entry<Key, PartialAgg> e : partials.entrySet()) {
      PartialAgg p = e.getValue();
      if (!p.isZero()) {
        Key k = e.getKey();
        ready.add(new Rec(k.op, PartialAgg.SIDE, k.k, null, null, p.encode(), p.n).toRow());
      }
    }
    partials.clear();
  }

  /**
   * What records net by: operator, side, key and arguments, hashed once. (A list of the Row's
   * values hashed and compared them through Scala collection wrappers: a quarter of Nexmark q5's
   * combiner time.)
   */
  private static final class Key {
    final int op;
    final Integer side;
    final String k;
    final String[] args;
    private final int hash;

    Key(int op, Integer side, String k, String[] args) {
      this.op = op;
      this.side = side;
      this.k = k;
      this.args = args;
      this.hash = ((31 * op + Objects.hashCode(side)) * 31 + Objects.hashCode(k)) * 31 + Arrays.hashCode(args);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Key)) {
        return false;
      }
      Key x = (Key) o;
      return hash == x.hash && op == x.op && Objects.equals(side, x.side) && Objects.equals(k, x.k)
          && Arrays.equals(args, x.args);
    }
  }
}
