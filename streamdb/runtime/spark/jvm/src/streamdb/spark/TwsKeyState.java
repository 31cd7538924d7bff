package streamdb.spark;

import java.util.AbstractMap;
import java.util.Iterator;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.function.Function;
import org.apache.spark.sql.streaming.MapState;
import scala.Tuple2;

/**
 * KeyState over Spark's state store: two transformWithState map variables of the current key.
 * `first` holds multiset 0, the texts and the value; `second` holds multiset 1 (a join's other
 * side, which must iterate apart from the first). Spark builds every state variable's encoders
 * again in each task, and with four variables that was a third of the executors' time in small
 * batches, so the value and the texts live in the first map under prefixes no row can start
 * with (rows and multiset keys are JSON or start with a letter; JSON escapes control
 * characters). Counts are stored as decimal text so that both variables share one type.
 */
final class TwsKeyState implements KeyState {
  private static final String VALUE = "\u0000";
  private static final char TEXT = '\u0001';
  private final MapState<String, String> first;
  private final MapState<String, String> second;

  TwsKeyState(MapState<String, String> first, MapState<String, String> second) {
    this.first = first;
    this.second = second;
  }

  private MapState<String, String> map(int which) {
    return which == 0 ? first : second;
  }

  @Override
  public long count(int which, String row) {
    String c = map(which).getValue(row);
    return c == null ? 0 : Long.parseLong(c);
  }

  @Override
  public long add(int which, String row, long delta) {
    MapState<String, String> m = map(which);
    String c = m.getValue(row);
    long n = (c == null ? 0 : Long.parseLong(c)) + delta;
    if (n == 0) {
      if (c != null) {
        m.removeKey(row);
      }
    } else {
      m.updateValue(row, Long.toString(n));
    }
    return n;
  }

  @Override
  public Iterator<Map.Entry<String, Long>> entries(int which) {
    return select(map(which).iterator(), k -> k.isEmpty() || k.charAt(0) > TEXT ? k : null, Long::parseLong);
  }

  /** Whether a key of the first map is a text's (its prefix), not a row's or the value's. */
  private static boolean isText(String k) {
    return !k.isEmpty() && k.charAt(0) == TEXT;
  }

  /** The entries whose key `keyOf` maps to a non-null key, with their values converted. */
  private static <V> Iterator<Map.Entry<String, V>> select(scala.collection.Iterator<Tuple2<String, String>> it,
                                                           Function<String, String> keyOf,
                                                           Function<String, V> valueOf) {
    return new Iterator<Map.Entry<String, V>>() {
      private Map.Entry<String, V> next;

      @Override
      public boolean hasNext() {
        while (next == null && it.hasNext()) {
          Tuple2<String, String> t = it.next();
          String k = keyOf.apply(t._1());
          if (k != null) {
            next = new AbstractMap.SimpleImmutableEntry<>(k, valueOf.apply(t._2()));
          }
        }
        return next != null;
      }

      @Override
      public Map.Entry<String, V> next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        Map.Entry<String, V> e = next;
        next = null;
        return e;
      }
    };
  }

  @Override
  public String text(String key) {
    return first.getValue(TEXT + key);
  }

  @Override
  public void putText(String key, String v) {
    first.updateValue(TEXT + key, v);
  }

  @Override
  public void removeText(String key) {
    first.removeKey(TEXT + key);
  }

  @Override
  public Iterator<Map.Entry<String, String>> texts() {
    return select(first.iterator(), k -> isText(k) ? k.substring(1) : null, v -> v);
  }

  @Override
  public String value() {
    return first.getValue(VALUE);  // null when absent
  }

  @Override
  public void setValue(String v) {
    first.updateValue(VALUE, v);
  }

  @Override
  public void clearValue() {
    first.removeKey(VALUE);
  }

  @Override
  public void clear() {
    first.clear();
    second.clear();
  }
}
