package streamdb.spark;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * The checkpoint file manager of the pipelines (`spark.sql.streaming.checkpointFileManagerClass`):
 * Spark's FileSystem-based one, over StreamDB's LocalFileSystem for `file:` paths (other schemes
 * are Hadoop's as usual). Spark's default, FileContext-based, resolves links with a forked
 * `readlink` on every rename when Hadoop has no native library.
 */
public final class CheckpointFiles extends FileSystemBasedCheckpointFileManager {
  public CheckpointFiles(Path path, Configuration hadoopConf) {
    super(path, withLocalFileSystem(hadoopConf));
  }

  private static Configuration withLocalFileSystem(Configuration hadoopConf) {
    Configuration conf = new Configuration(hadoopConf);
    conf.setClassLoader(LocalFileSystem.class.getClassLoader());
    conf.set("fs.file.impl", LocalFileSystem.class.getName());
    // Not from (or into) the process-wide cache, which holds Hadoop's own local file system.
    conf.setBoolean("fs.file.impl.disable.cache", true);
    return conf;
  }
}
