package streamdb.spark;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.util.LongAccumulator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One layer of the pipeline: every operator instance of the layer, keyed by (instance, key), in
 * one transformWithState operator. The state variables are the same for every kind, so views can
 * be added and dropped (the spec changes) while the stored state stays readable.
 */
public final class DeltaProcessor extends StatefulProcessor<Row, Row, Row> {
  private static final long serialVersionUID = 1L;
  private final String specJson;
  // Entries added minus removed in the layer's state store (CountingKeyState), summed on the driver.
  private final LongAccumulator stateRows;
  // The timers the layer's temporal filters set and removed (Ticks); null in a pipeline without them.
  private final ClockCounts clockCounts;
  private final BlockCache.Settings blockCache;
  private transient Spec spec;
  private transient CountingKeyState state;

  public DeltaProcessor(String specJson, LongAccumulator stateRows, ClockCounts clockCounts,
                        BlockCache.Settings blockCache) {
    this.specJson = specJson;
    this.stateRows = stateRows;
    this.clockCounts = clockCounts;
    this.blockCache = blockCache;
  }

  // Deserialized in the executor's task before the task opens its state store: the first one
  // makes the executor's shared block cache (BlockCache).
  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    BlockCache.install(blockCache);
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    spec = Spec.parse(specJson);
    StatefulProcessorHandle h = getHandle();
    // Two variables, not one per kind of state: Spark builds each one's encoders in every task.
    // Built under a conf that interprets their projections instead of generating code for them:
    // generating it (then finding the class cached) was half of this method, and this method 15%
    // of the JVM's CPU with small micro-batches (docs/views.md, "A small micro-batch's fixed cost").
    @SuppressWarnings("unchecked")
    MapState<String, String>[] vars = SQLConf.withExistingConf(interpretedProjections(), () -> new MapState[] {
        h.getMapState("s0", Encoders.STRING(), Encoders.STRING(), TTLConfig.NONE()),
        h.getMapState("s1", Encoders.STRING(), Encoders.STRING(), TTLConfig.NONE())});
    state = new CountingKeyState(new TwsKeyState(vars[0], vars[1]));
  }

  /** The task's SQL conf, with Spark's projections interpreted rather than compiled. */
  private static SQLConf interpretedProjections() {
    SQLConf conf = new SQLConf();
    CollectionConverters.asJava(SQLConf.get().getAllConfs()).forEach(conf::setConfString);
    conf.setConfString("spark.sql.codegen.factoryMode", "NO_CODEGEN");
    return conf;
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(Row key, scala.collection.Iterator<Row> rows,
                                                        TimerValues timerValues) {
    Spec.Op op = spec.op(key.getInt(0));
    List<Row> out = new ArrayList<>();
    if (op == null) {
      return CollectionConverters.asScala(out.iterator());  // an operator dropped since: nothing to do
    }
    Iterator<Row> javaRows = CollectionConverters.asJava(rows);
    Iterator<Rec> recs = new Iterator<Rec>() {
      @Override
      public boolean hasNext() {
        return javaRows.hasNext();
      }

      @Override
      public Rec next() {
        return Rec.of(javaRows.next());
      }
    };
    List<Rec> results = new ArrayList<>();
    String k = key.isNullAt(1) ? "" : key.getString(1);
    state.begin();
    if (op.kind == Spec.Kind.TEMPORAL) {
      Temporal.apply(op, k, recs, state, results, clock(timerValues), false);
    } else {
      Operators.apply(op, k, recs, state, results);
    }
    long added = state.takeDelta();
    if (added != 0) {
      stateRows.add(added);
    }
    for (Rec r : results) {
      out.add(r.toRow());
    }
    return CollectionConverters.asScala(out.iterator());
  }

  /** A temporal filter's timer (the only operator that sets any): its row starts or stops showing. */
  @Override
  public scala.collection.Iterator<Row> handleExpiredTimer(Row key, TimerValues timerValues,
                                                           ExpiredTimerInfo expiredTimerInfo) {
    Spec.Op op = spec.op(key.getInt(0));
    List<Row> out = new ArrayList<>();
    state.begin();
    if (op == null) {
      // A dropped view's temporal filter (only they set timers): its row's state goes with the
      // timer, which is counted as gone, or the driver would think it pending for good.
      Temporal.dropped(state, expiredTimerInfo.getExpiryTimeInMs(), clock(timerValues));
    } else if (op.kind == Spec.Kind.TEMPORAL) {
      List<Rec> results = new ArrayList<>();
      Temporal.apply(op, key.isNullAt(1) ? "" : key.getString(1), java.util.Collections.emptyIterator(), state,
                     results, clock(timerValues), true);
      for (Rec r : results) {
        out.add(r.toRow());
      }
    }
    long added = state.takeDelta();
    if (added != 0) {
      stateRows.add(added);
    }
    return CollectionConverters.asScala(out.iterator());
  }

  private Temporal.Clock clock(TimerValues timerValues) {
    StatefulProcessorHandle h = getHandle();
    long now = timerValues.getCurrentProcessingTimeInMs() * 1000L;
    long run = spec.run();
    return new Temporal.Clock() {
      @Override
      public long nowMicros() {
        return now;
      }

      @Override
      public long run() {
        return run;
      }

      @Override
      public void register(long ms) {
        h.registerTimer(ms);
        count(ClockCounts.thisRun(ms, 1));
      }

      @Override
      public void delete(long ms, long setBy) {
        h.deleteTimer(ms);
        fired(ms, setBy);
      }

      @Override
      public void fired(long ms, long setBy) {
        count(ClockCounts.removed(ms, setBy, run));
      }

      private void count(long[] change) {
        if (clockCounts != null) {
          clockCounts.add(change);
        }
      }
    };
  }
}
