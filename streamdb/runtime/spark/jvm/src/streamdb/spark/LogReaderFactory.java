package streamdb.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayInputStream;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.TimeMicroVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.arrow.vector.util.TransferPair;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.rocksdb.RocksIterator;

/** Reads a LogPartition on an executor: its log batches as columnar batches of the wide schema. */
final class LogReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final String planText;
  private final String schemaJson;

  LogReaderFactory(String planText, String schemaJson) {
    this.planText = planText;
    this.schemaJson = schemaJson;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("the log is read as columnar batches");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    JsonNode plan = LogProvider.plan(Map.of("plan", planText));
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    if (partition instanceof LogGroup) {
      return new GroupReader(plan, schema, ((LogGroup) partition).parts);
    }
    return new Reader(plan, schema, (LogPartition) partition);
  }

  /** The partitions of a LogGroup one after another, each opened when the one before is done. */
  static final class GroupReader implements PartitionReader<ColumnarBatch> {
    private final JsonNode plan;
    private final StructType schema;
    private final LogPartition[] parts;
    private int next;
    private Reader current;

    GroupReader(JsonNode plan, StructType schema, LogPartition[] parts) {
      this.plan = plan;
      this.schema = schema;
      this.parts = parts;
    }

    @Override
    public boolean next() throws java.io.IOException {
      while (true) {
        if (current != null && current.next()) {
          return true;
        }
        if (current != null) {
          current.close();
          current = null;
        }
        if (next == parts.length) {
          return false;
        }
        current = new Reader(plan, schema, parts[next++]);
      }
    }

    @Override
    public ColumnarBatch get() {
      return current.get();
    }

    @Override
    public void close() throws java.io.IOException {
      if (current != null) {
        current.close();
        current = null;
      }
    }
  }

  static final class Reader implements PartitionReader<ColumnarBatch> {
    private final StructType schema;
    private final LogPartition part;
    private final Map<String, String> columns = new HashMap<>();  // wide name -> log column
    private final BufferAllocator allocator = new RootAllocator();
    private RocksIterator it;
    private byte[] prefix;
    private ArrowStreamReader payload;
    private long payloadNext;  // offset of the next row the open payload holds
    private final List<AutoCloseable> current = new ArrayList<>();
    private ColumnarBatch batch;
    private boolean seedDone;

    Reader(JsonNode plan, StructType schema, LogPartition part) {
      this.schema = schema;
      this.part = part;
      JsonNode rel = plan.path("relations").path(Integer.toString(part.relation));
      for (JsonNode pair : rel.path("columns")) {
        columns.put(pair.get(1).asText(), pair.get(0).asText());
      }
      if (part.relation != LogStream.SEED_RELATION) {
        LogStore store = LogStore.open(plan.get("log").get("path").asText());
        it = store.seek(part.relation, part.partition, part.start);
        prefix = LogStore.prefix(part.relation, part.partition);
      }
    }

    @Override
    public boolean next() throws java.io.IOException {
      release();
      if (part.relation == LogStream.SEED_RELATION) {
        if (seedDone) {
          return false;
        }
        seedDone = true;
        batch = constantBatch(1);
        return true;
      }
      while (true) {
        if (payload != null) {
          if (payload.loadNextBatch()) {
            VectorSchemaRoot root = payload.getVectorSchemaRoot();
            long first = payloadNext;
            int n = root.getRowCount();
            payloadNext += n;
            long lo = Math.max(part.start, first);
            long hi = Math.min(part.end, first + n);
            if (hi <= lo) {
              if (first >= part.end) {
                return false;
              }
              continue;
            }
            batch = wide(root, (int) (lo - first), (int) (hi - lo), lo);
            return true;
          }
          payload.close();
          payload = null;
        }
        if (it == null || !it.isValid() || !LogStore.startsWith(it.key(), prefix)) {
          return false;
        }
        ByteBuffer k = ByteBuffer.wrap(it.key(), prefix.length, 16);
        long first = k.getLong();
        if (first >= part.end) {
          return false;
        }
        payload = new ArrowStreamReader(new ByteArrayInputStream(it.value()), allocator);
        payloadNext = first;
        it.next();
      }
    }

    private ColumnarBatch constantBatch(int n) {
      ColumnVector[] cols = new ColumnVector[schema.fields().length];
      for (int i = 0; i < cols.length; i++) {
        StructField f = schema.fields()[i];
        ConstantColumnVector c = new ConstantColumnVector(n, f.dataType());
        switch (f.name()) {
          case "__rel":
            c.setInt(part.relation);
            break;
          case "__tag":
            c.setInt(part.tag == null ? 0 : part.tag);
            break;
          case "__part":
            c.setInt(0);
            break;
          case "__off":
          case "__w":
            c.setLong(0);
            break;
          default:
            c.setNull();
        }
        current.add(c);
        cols[i] = c;
      }
      return new ColumnarBatch(cols, n);
    }

    /** A TIME column (microseconds of the day in the log) as Spark's TimeType, which holds
     * nanoseconds: Spark's Arrow reader knows only nanosecond time vectors. */
    private ColumnVector nanosOfDay(TimeMicroVector v, DataType type, int n) {
      OnHeapColumnVector out = new OnHeapColumnVector(n, type);
      for (int r = 0; r < n; r++) {
        if (v.isNull(r)) {
          out.putNull(r);
        } else {
          out.putLong(r, v.get(r) * 1000L);
        }
      }
      current.add(out);
      return out;
    }

    private ColumnarBatch wide(VectorSchemaRoot root, int from, int n, long firstOffset) {
      boolean whole = from == 0 && n == root.getRowCount();
      ColumnVector[] cols = new ColumnVector[schema.fields().length];
      for (int i = 0; i < cols.length; i++) {
        StructField f = schema.fields()[i];
        String name = f.name();
        String source = name.equals("__w") ? "__weight" : name.equals("__rowtime") ? "rowtime" : columns.get(name);
        if (source != null) {
          FieldVector v = root.getVector(source);
          if (!whole) {
            TransferPair t = v.getTransferPair(allocator);
            t.splitAndTransfer(from, n);
            v = (FieldVector) t.getTo();
            current.add(v);
          }
          cols[i] = v instanceof TimeMicroVector ? nanosOfDay((TimeMicroVector) v, f.dataType(), n) : new ArrowColumnVector(v);
          continue;
        }
        if (name.equals("__off")) {
          OnHeapColumnVector offs = new OnHeapColumnVector(n, DataTypes.LongType);
          for (int r = 0; r < n; r++) {
            offs.putLong(r, firstOffset + r);
          }
          current.add(offs);
          cols[i] = offs;
          continue;
        }
        ConstantColumnVector c = new ConstantColumnVector(n, f.dataType());
        if (name.equals("__rel")) {
          c.setInt(part.relation);
        } else if (name.equals("__part")) {
          c.setInt(part.partition);
        } else if (name.equals("__tag") && part.tag != null) {
          c.setInt(part.tag);
        } else {
          c.setNull();
        }
        current.add(c);
        cols[i] = c;
      }
      return new ColumnarBatch(cols, n);
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    private void release() {
      for (Iterator<AutoCloseable> c = current.iterator(); c.hasNext(); ) {
        try {
          c.next().close();
        } catch (Exception e) {
          // releasing memory of a batch already consumed: nothing else to do
        }
        c.remove();
      }
      batch = null;
    }

    @Override
    public void close() throws java.io.IOException {
      release();
      if (payload != null) {
        payload.close();
        payload = null;
      }
      if (it != null) {
        it.close();
        it = null;
      }
      allocator.close();
    }
  }
}
