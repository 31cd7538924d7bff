package streamdb.spark;

import java.lang.reflect.Field;
import org.apache.spark.sql.execution.streaming.state.RocksDBLoader;
import org.apache.spark.sql.execution.streaming.state.RocksDBMemoryManager$;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.WriteBufferManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The executor's shared RocksDB block cache for the state stores (bounded memory), split into
 * few, large shards.
 *
 * Spark builds that cache with RocksDB's default sharding: 64 shards once it holds 32 MiB or
 * more, so 4 MiB each at our 256 MiB budget. The memtables are charged to the same cache (by
 * the write buffer manager), and an SST file's bloom filter and index are single blocks of a few
 * MiB (a 64 MiB file of join rows: a ~4 MiB filter). Such a block never stays in a 4 MiB shard:
 * RocksDB frees a block released over its shard's capacity, so every read of the store read the
 * filter again from its file (Nexmark q4 at 10M events: ~70% of the executors' time re-reading
 * filter and index blocks, ~45 s per micro-batch). Shards of at least 64 MiB hold them.
 *
 * The cache is a JVM-wide singleton in Spark's RocksDBMemoryManager, made when the first store
 * opens. transformWithState accepts no provider but Spark's own, so this installs it from the
 * operator's deserialization (DeltaProcessor.readObject), which comes before the task opens its
 * store: built as Spark builds it but for the shard count. If Spark's internals change, it logs
 * why and Spark makes its own.
 */
final class BlockCache {
  private static final Logger LOG = LoggerFactory.getLogger(BlockCache.class);
  static final long MIN_SHARD_BYTES = 64L << 20;
  private static final int MAX_SHARD_BITS = 6;  // RocksDB's own limit for its default
  private static volatile boolean installed;

  private BlockCache() {}

  /** log2 of the shard count: shards of at least MIN_SHARD_BYTES. */
  static int shardBits(long totalBytes) {
    int bits = 0;
    while (bits < MAX_SHARD_BITS && (totalBytes >> (bits + 1)) >= MIN_SHARD_BYTES) {
      bits++;
    }
    return bits;
  }

  /** The settings Spark reads for its cache (RocksDBConf), taken on the driver. */
  static final class Settings implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final boolean bounded;
    final long totalMB;
    final double writeBufferRatio;
    final double highPriorityRatio;

    Settings(boolean bounded, long totalMB, double writeBufferRatio, double highPriorityRatio) {
      this.bounded = bounded;
      this.totalMB = totalMB;
      this.writeBufferRatio = writeBufferRatio;
      this.highPriorityRatio = highPriorityRatio;
    }
  }

  static void install(Settings conf) {
    if (installed || conf == null) {
      return;
    }
    RocksDBMemoryManager$ manager = RocksDBMemoryManager$.MODULE$;
    synchronized (manager) {  // getOrCreateRocksDBMemoryManagerAndCache's lock
      if (installed) {
        return;
      }
      installed = true;
      if (!conf.bounded || conf.writeBufferRatio + conf.highPriorityRatio >= 1.0 || conf.totalMB <= 0) {
        return;  // unbounded: a cache per store; or settings Spark refuses, with its own message
      }
      try {
        Field cacheField = RocksDBMemoryManager$.class.getDeclaredField("cache");
        Field managerField = RocksDBMemoryManager$.class.getDeclaredField("writeBufferManager");
        cacheField.setAccessible(true);
        managerField.setAccessible(true);
        if (cacheField.get(null) != null || managerField.get(null) != null) {
          return;  // a store opened before: its cache stays
        }
        long total = conf.totalMB << 20;
        // The native library, as Spark's store loads it (with the Kafka log nothing has yet).
        RocksDBLoader.loadLibrary();
        Cache cache = new LRUCache(total, shardBits(total), false, conf.highPriorityRatio);
        WriteBufferManager buffers = new WriteBufferManager((long) (total * conf.writeBufferRatio), cache);
        // Both or neither: Spark asserts that the cache is unset while the buffer manager is.
        cacheField.set(null, cache);
        try {
          managerField.set(null, buffers);
        } catch (ReflectiveOperationException | RuntimeException e) {
          cacheField.set(null, null);
          throw e;
        }
        LOG.info("state store block cache: {} MiB in {} shards", conf.totalMB, 1 << shardBits(total));
      } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
        LOG.warn("state store block cache left to Spark: {}", e.toString());
      }
    }
  }
}
