package streamdb.spark;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/** KeyState in hash maps: for the operator tests (Harness), not for the pipeline. */
public final class MemoryKeyState implements KeyState {
  private final Map<String, Long> m0 = new HashMap<>();
  private final Map<String, Long> m1 = new HashMap<>();
  private final Map<String, String> texts = new HashMap<>();
  private String value;

  private Map<String, Long> map(int which) {
    return which == 0 ? m0 : m1;
  }

  @Override
  public long count(int which, String row) {
    Long c = map(which).get(row);
    return c == null ? 0 : c;
  }

  @Override
  public long add(int which, String row, long delta) {
    long n = count(which, row) + delta;
    if (n == 0) {
      map(which).remove(row);
    } else {
      map(which).put(row, n);
    }
    return n;
  }

  @Override
  public Iterator<Map.Entry<String, Long>> entries(int which) {
    return new HashMap<>(map(which)).entrySet().iterator();
  }

  @Override
  public String text(String key) {
    return texts.get(key);
  }

  @Override
  public void putText(String key, String v) {
    texts.put(key, v);
  }

  @Override
  public void removeText(String key) {
    texts.remove(key);
  }

  @Override
  public Iterator<Map.Entry<String, String>> texts() {
    return new HashMap<>(texts).entrySet().iterator();
  }

  @Override
  public String value() {
    return value;
  }

  @Override
  public void setValue(String v) {
    value = v;
  }

  @Override
  public void clearValue() {
    value = null;
  }

  @Override
  public void clear() {
    m0.clear();
    m1.clear();
    texts.clear();
    value = null;
  }

  /** Entries held: rows of both multisets, texts, and the value. */
  public long size() {
    return m0.size() + m1.size() + texts.size() + (value == null ? 0 : 1);
  }

  public boolean isEmpty() {
    return m0.isEmpty() && m1.isEmpty() && texts.isEmpty() && value == null;
  }
}
