package streamdb.spark;

import org.apache.spark.sql.catalyst.FunctionIdentifier$;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.TryEval;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/**
 * {@code sdb_try(x)}: x, or NULL where evaluating x raises (Spark's own TryEval, on which its
 * try_ functions are built; it has no SQL name of its own). The routing wraps a view's expressions
 * that call functions able to raise on a row (make_date, a regular expression from the data) as
 * {@code sdb_try(named_struct(...)) IS NULL}, which is true exactly when one of them raised, so
 * that row becomes the view's error data instead of failing the whole pipeline.
 */
public final class TryFunction {
  public static final String NAME = "sdb_try";

  private TryFunction() {}

  /** Registers sdb_try in the session's function registry (before its streaming query starts). */
  public static void register(org.apache.spark.sql.classic.SparkSession session) {
    registerUnary(session, NAME, TryEval.class.getName(), TryEval::new);
  }

  /** A one-argument SQL function `name` whose call is the expression `make` builds. */
  static void registerUnary(org.apache.spark.sql.classic.SparkSession session, String name, String className,
      SerializableBuilder make) {
    session.sessionState().functionRegistry().registerFunction(
        // A temporary function's identifier, as Spark 4.3 names them: system.session.<name>.
        FunctionIdentifier$.MODULE$.apply(name, scala.Option.apply("session"), scala.Option.apply("system")),
        new ExpressionInfo(className, name),
        new Builder(name, make));
  }

  interface SerializableBuilder extends java.util.function.Function<Expression, Expression>, java.io.Serializable {}

  private static final class Builder extends AbstractFunction1<Seq<Expression>, Expression>
      implements java.io.Serializable {
    private final String name;
    private final SerializableBuilder make;

    Builder(String name, SerializableBuilder make) {
      this.name = name;
      this.make = make;
    }

    @Override
    public Expression apply(Seq<Expression> children) {
      if (children.size() != 1) {
        throw new IllegalArgumentException(name + " takes one argument");
      }
      return make.apply(children.head());
    }
  }
}
