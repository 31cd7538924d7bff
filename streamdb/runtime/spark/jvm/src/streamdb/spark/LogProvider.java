package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The relations' change logs in the server's RocksDB as a Spark streaming source (the JVM twin of
 * runtime/spark/log_source.py, with the same offsets and rows): the driver reads the logs' ends
 * and the executors read the batches, each through its own RocksDB secondary instance, decoding
 * the Arrow IPC payloads straight into columnar batches. Option `plan`: the same JSON the Python
 * source takes.
 */
public final class LogProvider implements TableProvider {
  static JsonNode plan(Map<String, String> options) {
    try {
      return new ObjectMapper().readTree(options.get("plan"));
    } catch (Exception e) {
      throw new IllegalArgumentException("bad log source plan: " + e.getMessage(), e);
    }
  }

  static StructType schemaOf(JsonNode plan) {
    return (StructType) DataType.fromJson(plan.get("spark_schema").asText());
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schemaOf(plan(options));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LogTable(properties.get("plan"), schema);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  static final class LogTable implements Table, SupportsRead {
    private final String plan;
    private final StructType schema;

    LogTable(String plan, StructType schema) {
      this.plan = plan;
      this.schema = schema;
    }

    @Override
    public String name() {
      return "streamdb_log";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      String text = options.get("plan") != null ? options.get("plan") : plan;
      return () -> new Scan() {
        @Override
        public StructType readSchema() {
          return schema;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
          return new LogStream(text, schema);
        }
      };
    }
  }
}
