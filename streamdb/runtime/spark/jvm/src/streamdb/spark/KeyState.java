package streamdb.spark;

import java.util.Iterator;
import java.util.Map;

/**
 * The state of one grouping key (operator instance, key): two multisets of text rows with their
 * counts, one map of text to text, and one value. Backed by Spark's state store in the pipeline
 * ({@link TwsKeyState}) and by hash maps in tests ({@link MemoryKeyState}).
 */
public interface KeyState {
  /** Multiset `which` (0 or 1): the count of `row`, 0 if absent. */
  long count(int which, String row);

  /** Adds `delta` to the count of `row` in multiset `which` (removing it at 0); returns the new count. */
  long add(int which, String row, long delta);

  /** Every (row, count) of multiset `which`. */
  Iterator<Map.Entry<String, Long>> entries(int which);

  String text(String key);

  void putText(String key, String value);

  void removeText(String key);

  Iterator<Map.Entry<String, String>> texts();

  String value();

  void setValue(String value);

  void clearValue();

  /** Forgets everything the key holds. */
  void clear();
}
