package streamdb.spark;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * A KeyState that counts the entries it adds and removes, for the pipeline's state-rows metric.
 * Spark's own count (`stateStore.rocksdb.trackTotalNumberOfRows`) reads every key before writing
 * it; the operators already read what they change, so this remembers what those reads saw and
 * reads again only for a write nothing read before (none in the operators today). One instance
 * serves one key at a time: {@link #begin} forgets what the previous key's reads saw.
 */
final class CountingKeyState implements KeyState {
  private final KeyState inner;
  private long delta;
  private Boolean valuePresent;  // null: not read yet for this key
  private final Map<String, Boolean> textPresent = new HashMap<>();

  CountingKeyState(KeyState inner) {
    this.inner = inner;
  }

  /** Starts a key: what earlier reads saw belongs to the previous key. */
  void begin() {
    valuePresent = null;
    textPresent.clear();
  }

  /** Entries added minus entries removed since the last call. */
  long takeDelta() {
    long d = delta;
    delta = 0;
    return d;
  }

  @Override
  public long count(int which, String row) {
    return inner.count(which, row);
  }

  @Override
  public long add(int which, String row, long change) {
    long n = inner.add(which, row, change);
    long old = n - change;
    if (old == 0 && n != 0) {
      delta++;
    } else if (old != 0 && n == 0) {
      delta--;
    }
    return n;
  }

  @Override
  public Iterator<Map.Entry<String, Long>> entries(int which) {
    return inner.entries(which);
  }

  @Override
  public String text(String key) {
    String v = inner.text(key);
    textPresent.put(key, v != null);
    return v;
  }

  private boolean hasText(String key) {
    Boolean known = textPresent.get(key);
    return known != null ? known : inner.text(key) != null;
  }

  @Override
  public void putText(String key, String v) {
    if (!hasText(key)) {
      delta++;
    }
    textPresent.put(key, true);
    inner.putText(key, v);
  }

  @Override
  public void removeText(String key) {
    if (hasText(key)) {
      delta--;
    }
    textPresent.put(key, false);
    inner.removeText(key);
  }

  @Override
  public Iterator<Map.Entry<String, String>> texts() {
    Iterator<Map.Entry<String, String>> it = inner.texts();
    return new Iterator<Map.Entry<String, String>>() {  // what it yields is known to be present
      @Override
      public boolean hasNext() {
        return it.hasNext();
      }

      @Override
      public Map.Entry<String, String> next() {
        return seen(it.next());
      }
    };
  }

  private Map.Entry<String, String> seen(Map.Entry<String, String> e) {
    textPresent.put(e.getKey(), true);
    return e;
  }

  @Override
  public String value() {
    String v = inner.value();
    valuePresent = v != null;
    return v;
  }

  private boolean hasValue() {
    return valuePresent != null ? valuePresent : inner.value() != null;
  }

  @Override
  public void setValue(String v) {
    if (!hasValue()) {
      delta++;
    }
    valuePresent = true;
    inner.setValue(v);
  }

  @Override
  public void clearValue() {
    if (hasValue()) {
      delta--;
    }
    valuePresent = false;
    inner.clearValue();
  }

  @Override
  public void clear() {
    long n = hasValue() ? 1 : 0;
    for (int which = 0; which < 2; which++) {
      for (Iterator<Map.Entry<String, Long>> it = inner.entries(which); it.hasNext(); it.next()) {
        n++;
      }
    }
    for (Iterator<Map.Entry<String, String>> it = inner.texts(); it.hasNext(); it.next()) {
      n++;
    }
    delta -= n;
    valuePresent = false;
    textPresent.clear();
    inner.clear();
  }
}
