package streamdb.spark;

import org.apache.spark.SparkThrowable;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.Seq;

/**
 * {@code sdb_error(x)}: NULL where evaluating x succeeds, else the error's text (Spark's
 * "[CONDITION] message" for its own errors). The routing wraps a view's CASE, COALESCE, AND, ...
 * under which something may raise for the rows taking one branch (a division in a THEN): the rows
 * for which this is not NULL become the view's error data, translated to Postgres's SQLSTATE on
 * the driver, instead of failing the whole pipeline for good. Unlike sdb_try, the value is not
 * kept: only whether and why it raised.
 */
public final class ErrorFunction extends Expression implements CodegenFallback, java.io.Serializable {
  public static final String NAME = "sdb_error";
  private static final long serialVersionUID = 1L;

  private final Expression child;
  private final Seq<Expression> children;

  public ErrorFunction(Expression child) {
    this.child = child;
    this.children = scala.jdk.javaapi.CollectionConverters.asScala(java.util.List.of(child)).toList();
  }

  /** Registers sdb_error in the session's function registry (before its streaming query starts). */
  public static void register(org.apache.spark.sql.classic.SparkSession session) {
    TryFunction.registerUnary(session, NAME, ErrorFunction.class.getName(), ErrorFunction::new);
  }

  /** The text a row's error is reported by: Spark's own errors carry their condition. */
  static String describe(Throwable e) {
    String message = e.getMessage() == null ? "" : e.getMessage();
    if (e instanceof SparkThrowable spark && spark.getCondition() != null
        && !message.startsWith("[" + spark.getCondition() + "]")) {
      return "[" + spark.getCondition() + "] " + message;
    }
    return e instanceof SparkThrowable ? message : e.getClass().getName() + ": " + message;
  }

  public Expression child() {
    return child;
  }

  @Override
  public Seq<Expression> children() {
    return children;
  }

  @Override
  public Expression withNewChildrenInternal(scala.collection.immutable.IndexedSeq<Expression> newChildren) {
    return new ErrorFunction(newChildren.head());
  }

  @Override
  public Object eval(InternalRow input) {
    try {
      child.eval(input);
      return null;
    } catch (RuntimeException e) {
      return UTF8String.fromString(describe(e));
    }
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    // Generated code calls eval: rare views only, and the catch is around the child's whole work.
    return CodegenFallback.super.doGenCode(ctx, ev);
  }

  // Extends Expression, not UnaryExpression: javac cannot override the latter's erased
  // withNewChildrenInternal, so the tree methods are written out here.

  // Never folded: a constant that raises (1/0 under a CASE) must raise per row, here.
  @Override
  public boolean foldable() {
    return false;
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public DataType dataType() {
    return DataTypes.StringType;
  }

  @Override
  public String prettyName() {
    return NAME;
  }

  @Override
  public int productArity() {
    return 1;
  }

  @Override
  public Object productElement(int n) {
    if (n != 0) {
      throw new IndexOutOfBoundsException(String.valueOf(n));
    }
    return child;
  }

  @Override
  public boolean canEqual(Object other) {
    return other instanceof ErrorFunction;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ErrorFunction e && e.child.equals(child);
  }

  @Override
  public int hashCode() {
    return 31 * NAME.hashCode() + child.hashCode();
  }
}
