package streamdb.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One layer of the pipeline: every operator instance of the layer, keyed by (instance, key), in
 * one transformWithState operator. The state variables are the same for every kind, so views can
 * be added and dropped (the spec changes) while the stored state stays readable.
 */
public final class DeltaProcessor extends StatefulProcessor<Row, Row, Row> {
  private static final long serialVersionUID = 1L;
  private final String specJson;
  private transient Spec spec;
  private transient KeyState state;

  public DeltaProcessor(String specJson) {
    this.specJson = specJson;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    spec = Spec.parse(specJson);
    StatefulProcessorHandle h = getHandle();
    MapState<String, Long> m0 = h.getMapState("m0", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
    MapState<String, Long> m1 = h.getMapState("m1", Encoders.STRING(), Encoders.LONG(), TTLConfig.NONE());
    MapState<String, String> texts = h.getMapState("t", Encoders.STRING(), Encoders.STRING(), TTLConfig.NONE());
    ValueState<String> value = h.getValueState("v", Encoders.STRING(), TTLConfig.NONE());
    state = new TwsKeyState(m0, m1, texts, value);
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
    Operators.apply(op, k, recs, state, results);
    for (Rec r : results) {
      out.add(r.toRow());
    }
    return CollectionConverters.asScala(out.iterator());
  }
}
