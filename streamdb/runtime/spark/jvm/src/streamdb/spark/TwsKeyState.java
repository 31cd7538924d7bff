package streamdb.spark;

import java.util.AbstractMap;
import java.util.Iterator;
import java.util.Map;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.ValueState;
import scala.Tuple2;

/** KeyState over Spark's state store (transformWithState state variables of the current key). */
final class TwsKeyState implements KeyState {
  private final MapState<String, Long> m0;
  private final MapState<String, Long> m1;
  private final MapState<String, String> texts;
  private final ValueState<String> value;

  TwsKeyState(MapState<String, Long> m0, MapState<String, Long> m1, MapState<String, String> texts,
              ValueState<String> value) {
    this.m0 = m0;
    this.m1 = m1;
    this.texts = texts;
    this.value = value;
  }

  private MapState<String, Long> map(int which) {
    return which == 0 ? m0 : m1;
  }

  @Override
  public long count(int which, String row) {
    Long c = map(which).getValue(row);
    return c == null ? 0 : c;
  }

  @Override
  public long add(int which, String row, long delta) {
    MapState<String, Long> m = map(which);
    Long c = m.getValue(row);
    long n = (c == null ? 0 : c) + delta;
    if (n == 0) {
      if (c != null) {
        m.removeKey(row);
      }
    } else {
      m.updateValue(row, n);
    }
    return n;
  }

  @Override
  public Iterator<Map.Entry<String, Long>> entries(int which) {
    return entriesOf(map(which).iterator());
  }

  /** A state variable's (key, value) pairs as Java map entries. */
  private static <V> Iterator<Map.Entry<String, V>> entriesOf(scala.collection.Iterator<Tuple2<String, V>> it) {
    return new Iterator<Map.Entry<String, V>>() {
      @Override
      public boolean hasNext() {
        return it.hasNext();
      }

      @Override
      public Map.Entry<String, V> next() {
        Tuple2<String, V> t = it.next();
        return new AbstractMap.SimpleImmutableEntry<>(t._1(), t._2());
      }
    };
  }

  @Override
  public String text(String key) {
    return texts.getValue(key);
  }

  @Override
  public void putText(String key, String v) {
    texts.updateValue(key, v);
  }

  @Override
  public void removeText(String key) {
    texts.removeKey(key);
  }

  @Override
  public Iterator<Map.Entry<String, String>> texts() {
    return entriesOf(texts.iterator());
  }

  @Override
  public String value() {
    return value.get();  // null when absent: one read, where exists() then get() made two
  }

  @Override
  public void setValue(String v) {
    value.update(v);
  }

  @Override
  public void clearValue() {
    value.clear();
  }

  @Override
  public void clear() {
    m0.clear();
    m1.clear();
    texts.clear();
    value.clear();
  }
}
