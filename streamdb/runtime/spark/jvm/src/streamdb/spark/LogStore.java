package streamdb.spark;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;

/**
 * The server's RocksDB, read as a secondary instance (one per JVM and path): it never writes and
 * catches up with the server's latest commit on demand. Key layout as storage/rocksdb.py writes
 * it: "L" | relation u64 | partition u32 | first offset u64 | count u64 -> one Arrow IPC batch,
 * and "Cend\0" | relation u64 | partition u32 -> the partition's end (u64), in the same write
 * (before the log's keys, as every key but the log's: format 3).
 */
final class LogStore {
  private static final Map<String, LogStore> OPEN = new HashMap<>();
  private final RocksDB db;
  private volatile long caughtUpAt = System.nanoTime() - (1L << 40);  // of the last catchUp()

  private LogStore(RocksDB db) {
    this.db = db;
  }

  static synchronized LogStore open(String path) {
    LogStore store = opened(path);
    store.catchUp();
    return store;
  }

  /**
   * The store for a trigger's end offsets, caught up unless a catch-up ran in the last
   * `maxAgeNanos`: every pipeline's trigger polls the log's end (10 times a second), and each
   * catch-up reads the primary's MANIFEST and WAL (mostly system time), so idle pipelines would
   * cost in proportion to their number. Writes within that age show at the next trigger. Readers
   * use open(): the rows up to a batch's end offsets must be visible to them.
   */
  static synchronized LogStore openRecent(String path, long maxAgeNanos) {
    LogStore store = opened(path);
    if (System.nanoTime() - store.caughtUpAt > maxAgeNanos) {
      store.catchUp();
    }
    return store;
  }

  private static LogStore opened(String path) {
    LogStore store = OPEN.get(path);
    if (store == null) {
      try {
        RocksDB.loadLibrary();
        String secondary = Files.createTempDirectory("streamdb-secondary-").toString();
        store = new LogStore(RocksDB.openAsSecondary(new Options(), path, secondary));
      } catch (Exception e) {
        throw new IllegalStateException("cannot read the log at " + path + ": " + e.getMessage(), e);
      }
      OPEN.put(path, store);
    }
    return store;
  }

  synchronized void catchUp() {
    try {
      caughtUpAt = System.nanoTime();
      db.tryCatchUpWithPrimary();
    } catch (RocksDBException e) {
      throw new IllegalStateException("cannot follow the log: " + e.getMessage(), e);
    }
  }

  static byte[] prefix(long relation, int partition) {
    return ByteBuffer.allocate(13).put((byte) 'L').putLong(relation).putInt(partition).array();
  }

  private static final byte[] END_KEY = {'C', 'e', 'n', 'd', 0};

  /** The next offset to be written in this log partition (0 if empty). */
  long endOffset(long relation, int partition) {
    // The end key, a small value: seeking onto the partition's last batch instead reads that
    // batch's whole block (tens of MB after a large COPY), at every micro-batch trigger.
    byte[] endKey = ByteBuffer.allocate(END_KEY.length + 12).put(END_KEY).putLong(relation).putInt(partition).array();
    try {
      byte[] end = db.get(endKey);
      if (end != null && end.length == 8) {
        return ByteBuffer.wrap(end).getLong();
      }
    } catch (RocksDBException e) {
      throw new IllegalStateException("cannot read the log's end: " + e.getMessage(), e);
    }
    // No end key: the partition is empty (or written by a server before end keys).
    byte[] prefix = prefix(relation, partition);
    byte[] last = Arrays.copyOf(prefix, prefix.length + 16);
    Arrays.fill(last, prefix.length, last.length, (byte) 0xff);
    try (RocksIterator it = db.newIterator()) {
      it.seekForPrev(last);
      if (it.isValid() && startsWith(it.key(), prefix)) {
        ByteBuffer k = ByteBuffer.wrap(it.key(), prefix.length, 16);
        return k.getLong() + k.getLong();
      }
      return 0;
    }
  }

  /** An iterator on the first batch of the partition that holds offsets at or after `start`. */
  RocksIterator seek(long relation, int partition, long start) {
    byte[] prefix = prefix(relation, partition);
    byte[] at = ByteBuffer.allocate(prefix.length + 16).put(prefix).putLong(start).putLong(-1L).array();
    RocksIterator it = db.newIterator();
    it.seekForPrev(at);
    boolean overlaps = false;
    if (it.isValid() && startsWith(it.key(), prefix)) {
      ByteBuffer k = ByteBuffer.wrap(it.key(), prefix.length, 16);
      overlaps = k.getLong() + k.getLong() > start;
    }
    if (!overlaps) {
      it.seek(ByteBuffer.allocate(prefix.length + 8).put(prefix).putLong(start).array());
    }
    return it;
  }

  static boolean startsWith(byte[] key, byte[] prefix) {
    if (key.length < prefix.length) {
      return false;
    }
    for (int i = 0; i < prefix.length; i++) {
      if (key[i] != prefix[i]) {
        return false;
      }
    }
    return true;
  }
}
