"""Rewrite Postgres system functions, operators and casts for DuckDB (pure: AST in, AST out).

Run on a query whose table references are already renamed to registered names (user
relations `r<id>`, system relations `registered_name(key)` aliased to their original name:
`pg_catalog.pg_class` -> `sys_pg_catalog__pg_class AS "pg_class"`, as planner/query.py does).
`rewrite_for_duckdb` then:

* strips `pg_catalog.` / `information_schema.` qualifiers that remain: on column references
  (`pg_catalog.pg_class.relname` -> `pg_class.relname`, which matches the alias above), on
  function calls (`pg_catalog.lower(x)`, `pg_catalog.array_agg(x)`) and on table functions
  in FROM (`pg_catalog.generate_series(...) s`, `pg_catalog.unnest(a) x`; a one-column alias
  also names the column, as in Postgres);
* replaces session and catalog functions by constants or CASE expressions computed from the
  PlanContext (version(), current_database(), current_user, pg_get_userbyid,
  pg_table_is_visible, pg_get_constraintdef, pg_get_indexdef, pg_get_viewdef, ...), and the
  static ones by `sdb_*` macros installed by runtime/duckdb_functions.py;
* resolves `'name'::regclass` (and ::regtype, ::regnamespace, ::regrole, ::regproc) to OIDs at
  rewrite time, raising UndefinedTable (42P01) for an unknown relation. A non-literal
  `expr::regclass` prints as the relation name (`c.oid::regclass` in psql's \\d), while
  `expr::regclass::oid` gives the OID; a literal `'x'::regclass` alone is its OID (it is
  almost always compared with an oid column);
* maps Postgres-only casts (::oid, ::name, ::"char", ::int2vector, ::pg_catalog.text, ...);
* `OPERATOR(pg_catalog.~)`, `~`, `!~`, `~*`, `!~*` become regular-expression matches and
  every `COLLATE ...` is dropped (DuckDB's collations are not Postgres's);
* a string literal in array syntax compared with `=`/`<>` (`polroles = '{0}'`) becomes a list.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.dialects.postgres import Postgres

from streamdb import types as T
from streamdb.catalog import FIRST_USER_OID
from streamdb.errors import UndefinedFunction, UndefinedObject, UndefinedTable
from streamdb.planner.context import SERVER_VERSION, PlanContext
from streamdb.runtime import system_catalog as sc

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


def version_string() -> str:
    """What version() returns; tools parse 'PostgreSQL <major>.<minor>' from it."""
    return f"PostgreSQL {SERVER_VERSION} on x86_64-pc-linux-gnu, compiled by gcc, 64-bit"


def _lit(v: str | int | float | bool | None) -> exp.Expression:
    if v is None:
        return exp.Null()
    if isinstance(v, bool):
        return exp.Boolean(this=v)
    if isinstance(v, str):
        return exp.Literal.string(v)
    return exp.Literal.number(v)


def _null(type_name: str = "VARCHAR") -> exp.Expression:
    return exp.Cast(this=exp.Null(), to=exp.DataType.build(type_name))


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _case(subject: exp.Expression, pairs: list[tuple[exp.Expression, exp.Expression]],
          default: exp.Expression) -> exp.Expression:
    if not pairs:
        return default
    return exp.Case(this=subject.copy(),
                    ifs=[exp.If(this=k, true=v) for k, v in pairs], default=default)


_TEXT_TYPES = {"text", "varchar", "name", "char", "bpchar", "character varying", "string"}
_TEXT_FUNCS = {"pg_get_serial_sequence", "quote_ident", "format", "concat", "current_schema",
               "lower", "upper", "trim", "replace", "substring", "substr"}

# Casts to Postgres-only types; the value is the DuckDB type.
_TYPE_MAP = {
    "oid": "BIGINT", "xid": "BIGINT", "xid8": "BIGINT", "cid": "BIGINT", "name": "VARCHAR",
    "\"char\"": "VARCHAR", "char": "VARCHAR", "bpchar": "VARCHAR", "regproc": "VARCHAR",
    "regprocedure": "VARCHAR", "aclitem": "VARCHAR", "pg_node_tree": "VARCHAR",
    "int2vector": "SMALLINT[]", "oidvector": "BIGINT[]", "text": "VARCHAR",
    "pg_lsn": "VARCHAR", "tid": "VARCHAR", "inet": "VARCHAR", "cidr": "VARCHAR",
}
_REG_TYPES = {"regclass", "regtype", "regnamespace", "regrole", "regproc", "regprocedure",
              "regoper", "regoperator", "regconfig", "regdictionary", "regcollation"}


def _type_name(dt: exp.Expression) -> str:
    """Lower-case Postgres spelling of a cast target, without a pg_catalog. qualifier."""
    s = dt.sql("postgres").lower()
    s = re.sub(r'\bpg_catalog\.', "", s).replace('"pg_catalog".', "")
    return s.strip()


class _Rewriter:
    def __init__(self, ctx: PlanContext) -> None:
        self.ctx = ctx
        self.catalog = ctx.catalog
        self.session = ctx.session
        self._regnames: dict[int, str] | None = None

    # -- relation facts -----------------------------------------------------------------------

    @property
    def regnames(self) -> dict[int, str]:
        if self._regnames is None:
            self._regnames = sc.regclass_names(self.catalog)
        return self._regnames

    def _regclass_oid_of_literal(self, text: str) -> int:
        oid = sc.lookup_regclass(self.catalog, text)
        if oid is None:
            raise UndefinedTable(f'relation "{text}" does not exist')
        return oid

    def _regtype_oid_of_literal(self, text: str) -> int:
        name = re.sub(r"^pg_catalog\.", "", text.strip().lower()).strip('"')
        is_array = name.endswith("[]")
        base = name[:-2] if is_array else name
        t = T.type_from_name(base)
        if t is None:
            for cand in T.ALL_TYPES:
                if sc.typname(cand) == base or "_" + sc.typname(cand) == base:
                    t = cand
                    is_array = is_array or base.startswith("_")
                    break
        if t is None:
            raise UndefinedObject(f'type "{text}" does not exist')
        return t.array_oid if is_array else t.oid

    def _namespace_oid_of_literal(self, text: str) -> int:
        name = text.strip().strip('"')
        for oid, n in sc.NAMESPACES:
            if n == name or n == name.lower():
                return oid
        raise UndefinedObject(f'schema "{text}" does not exist')

    def _name_oid_pairs(self, kind: str) -> list[tuple[str, int]]:
        if kind == "regclass":
            pairs: list[tuple[str, int]] = []
            for oid, name in self.regnames.items():
                pairs.append((name, oid))
            for key, oid in sc.SYSTEM_TABLE_OIDS.items():
                pairs.append((key, oid))
            for rel in self.catalog.relations.values():
                pairs.append((rel.qualified_name, rel.oid))
            return pairs
        if kind == "regtype":
            out = []
            for t in T.ALL_TYPES:
                out += [(t.name, t.oid), (sc.typname(t), t.oid), (t.name + "[]", t.array_oid),
                        ("_" + sc.typname(t), t.array_oid)]
            return out
        if kind == "regnamespace":
            return [(n, oid) for oid, n in sc.NAMESPACES]
        if kind == "regrole":
            return [(self.session.user, sc.SUPERUSER_OID)]
        return []

    def _oid_name_pairs(self, kind: str) -> list[tuple[int, str]]:
        if kind == "regclass":
            return sorted(self.regnames.items())
        if kind == "regnamespace":
            return list(sc.NAMESPACES)
        if kind == "regrole":
            return [(sc.SUPERUSER_OID, self.session.user)]
        return []

    # -- reg* casts ---------------------------------------------------------------------------

    def _is_textual(self, e: exp.Expression) -> bool:
        if isinstance(e, exp.Literal):
            return e.is_string
        if isinstance(e, (exp.Parameter, exp.Placeholder, exp.DPipe, exp.Concat)):
            return True
        if isinstance(e, exp.Cast):
            return _type_name(e.to) in _TEXT_TYPES
        if isinstance(e, exp.Anonymous):
            return e.name.lower() in _TEXT_FUNCS
        if isinstance(e, exp.Dot) and isinstance(e.expression, exp.Anonymous):
            return e.expression.name.lower() in _TEXT_FUNCS
        return isinstance(e, (exp.Lower, exp.Upper, exp.Trim, exp.CurrentSchema))

    def _reg_literal_oid(self, kind: str, text: str) -> int | None:
        if kind == "regclass":
            return self._regclass_oid_of_literal(text)
        if kind == "regtype":
            return self._regtype_oid_of_literal(text)
        if kind == "regnamespace":
            return self._namespace_oid_of_literal(text)
        if kind == "regrole":
            if text.strip('"') != self.session.user:
                raise UndefinedObject(f'role "{text}" does not exist')
            return sc.SUPERUSER_OID
        if kind in ("regproc", "regprocedure"):
            name = re.sub(r"\(.*$", "", text.strip()).split(".")[-1].strip('"')
            oid = sc.proc_oid(name)
            if oid is not None:
                return oid
            raise UndefinedFunction(f'function "{text}" does not exist')
        return None

    def _reg_to_oid(self, kind: str, x: exp.Expression) -> exp.Expression:
        if isinstance(x, exp.Literal) and x.is_string:
            if re.fullmatch(r"\s*\d+\s*", x.this):
                return _lit(int(x.this))
            oid = self._reg_literal_oid(kind, x.this)
            return _lit(oid) if oid is not None else _null("BIGINT")
        if isinstance(x, exp.Literal):
            return x
        x = self.rewrite(x)
        if self._is_textual(x):
            text = exp.Cast(this=x, to=exp.DataType.build("VARCHAR"))
            return _case(text, [(_lit(n), _lit(o)) for n, o in self._name_oid_pairs(kind)],
                         exp.TryCast(this=text.copy(), to=exp.DataType.build("BIGINT")))
        return exp.Cast(this=x, to=exp.DataType.build("BIGINT"))

    def _reg_to_text(self, kind: str, x: exp.Expression) -> exp.Expression:
        if isinstance(x, exp.Literal) and x.is_string and not re.fullmatch(r"\s*\d+\s*", x.this):
            oid = self._reg_literal_oid(kind, x.this)
            if kind == "regtype" and oid is not None:
                return _lit(sc.format_type(oid))
            names = dict(self._oid_name_pairs(kind))
            return _lit(names.get(oid, x.this) if oid is not None else x.this)
        if self._is_textual(x) and not isinstance(x, exp.Literal):
            return exp.Cast(this=self.rewrite(x), to=exp.DataType.build("VARCHAR"))
        oid_expr = self._reg_to_oid(kind, x)
        if kind == "regtype":
            return _call("sdb_regtype_name", oid_expr)
        if kind in ("regproc", "regprocedure"):
            return exp.Cast(this=oid_expr, to=exp.DataType.build("VARCHAR"))
        text = exp.Cast(this=oid_expr, to=exp.DataType.build("VARCHAR"))
        return _case(oid_expr, [(_lit(o), _lit(n)) for o, n in self._oid_name_pairs(kind)], text)

    def _pre_cast(self, node: exp.Cast) -> exp.Expression | None:
        target = _type_name(node.to)
        inner = node.this
        if isinstance(inner, exp.Cast) and _type_name(inner.to) in _REG_TYPES:
            kind = _type_name(inner.to)
            if target in ("oid", "int", "integer", "bigint", "int4", "int8"):
                return self._reg_to_oid(kind, inner.this)
            if target in _TEXT_TYPES:
                return self._reg_to_text(kind, inner.this)
            return None
        if target in _REG_TYPES:
            x = node.this
            if (target in ("regproc", "regprocedure") and isinstance(x, exp.Literal)
                    and x.is_string and not re.fullmatch(r"\s*\d+\s*", x.this)):
                # regproc columns (pg_type.typinput, ...) hold names here, not oids: pgjdbc
                # compares `typinput = 'pg_catalog.array_in'::regproc`.
                return _lit(re.sub(r"\(.*$", "", x.this.strip()).split(".")[-1].strip('"'))
            if (isinstance(x, exp.Literal) and x.is_string) or self._is_textual(x):
                return self._reg_to_oid(target, x)
            return self._reg_to_text(target, x)
        return None

    # -- traversal ----------------------------------------------------------------------------

    def rewrite(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Select):
            self._keep_output_names(node)
        if isinstance(node, exp.Cast):
            pre = self._pre_cast(node)
            if pre is not None:
                return pre
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression):
                node.set(key, self.rewrite(value))
            elif isinstance(value, list):
                node.set(key, [self.rewrite(v) if isinstance(v, exp.Expression) else v
                               for v in value])
        return self.post(node)

    def _keep_output_names(self, select: exp.Select) -> None:
        """Alias unaliased projections we are about to rewrite with the name Postgres gives
        them (`pg_catalog.format_type(...)` -> "format_type"), so outer queries and clients see
        Postgres's column names rather than DuckDB's text of the rewritten expression."""
        out: list[exp.Expression] = []
        for proj in select.expressions:
            name = "?column?"
            if not isinstance(proj, (exp.Alias, exp.Column, exp.Star)):
                name = postgres_output_name(proj)
            if name != "?column?" and (
                    self.rewrite(proj.copy()).sql("postgres") != proj.sql("postgres")):
                out.append(exp.Alias(this=proj.copy(), alias=exp.to_identifier(name, quoted=True)))
            else:
                out.append(proj)
        select.set("expressions", out)

    def post(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, exp.Dot):
            return self._dot(node)
        if isinstance(node, exp.Table):
            return self._table(node)
        if isinstance(node, exp.Collate):
            return node.this
        if isinstance(node, exp.Operator):
            return self._operator(node)
        if isinstance(node, exp.Cast):
            return self._cast(node)
        if isinstance(node, (exp.EQ, exp.NEQ)):
            return self._array_text_compare(node)
        if isinstance(node, (exp.Like, exp.ILike)) and not isinstance(node.parent, exp.Escape):
            # Postgres's LIKE escapes with a backslash unless told otherwise (psql's TAB
            # completion sends `relname LIKE 'mv\_c%'`); DuckDB's has no escape character.
            return exp.Escape(this=node, expression=_lit("\\"))
        if isinstance(node, exp.Anonymous):
            return self._function(node.name.lower(), list(node.expressions), node)
        handler = _SIMPLE_FUNCS.get(type(node))
        if handler is not None:
            return handler(self, node)
        return node

    # -- node kinds ---------------------------------------------------------------------------

    def _column(self, node: exp.Column) -> exp.Expression:
        if node.name.lower() == "tableoid" and not node.this.quoted:
            oid = self._tableoid(node)
            if oid is not None:
                return _lit(oid)
        db = node.args.get("db")
        if db is not None and db.name.lower() in SYSTEM_SCHEMAS and not node.args.get("catalog"):
            node.set("db", None)
            return node
        if (not node.table and isinstance(node.this, exp.Identifier) and not node.this.quoted):
            name = node.this.name.lower()
            if name in ("user", "current_role"):
                return _lit(self.session.user)
            if name == "current_catalog":
                return _lit(self.session.database)
        return node

    def _tableoid(self, node: exp.Column) -> int | None:
        """The system column `x.tableoid` of a system table x (psql's \\dd, \\dL join
        pg_description on it): that table's OID. None when x is not a system table."""
        select = node.find_ancestor(exp.Select)
        if select is None:
            return None
        tables = [t for t in select.find_all(exp.Table)
                  if not node.table or t.alias_or_name == node.table]
        keys = {sc.system_table_key_for_registered(t.name) for t in tables}
        if len(keys) != 1 or None in keys:
            return None
        return sc.SYSTEM_TABLE_OIDS[str(keys.pop())]

    def _dot(self, node: exp.Dot) -> exp.Expression:
        left = node.this
        # pg_catalog.f(...): the call below was already rewritten (maybe no longer a Func).
        if (isinstance(left, exp.Identifier) and left.name.lower() in SYSTEM_SCHEMAS
                and not isinstance(node.expression, exp.Identifier)):
            return node.expression
        return node

    def _table(self, node: exp.Table) -> exp.Expression:
        if isinstance(node.this, exp.Func):
            db = node.args.get("db")
            if db is not None and db.name.lower() in SYSTEM_SCHEMAS:
                node.set("db", None)
            alias = node.args.get("alias")
            if (alias is not None and alias.this is not None and not alias.args.get("columns")
                    and isinstance(node.this, (exp.Explode, exp.Unnest, exp.GenerateSeries,
                                               exp.ExplodingGenerateSeries))):
                alias.set("columns", [alias.this.copy()])
        return node

    def _operator(self, node: exp.Operator) -> exp.Expression:
        op = str(node.args.get("operator") or "").lower()
        op = re.sub(r"^pg_catalog\.", "", op.strip())
        a, b = node.this, node.expression
        builders: dict[str, Callable[[], exp.Expression]] = {
            "~": lambda: exp.RegexpLike(this=a, expression=b),
            "!~": lambda: exp.Not(this=exp.RegexpLike(this=a, expression=b)),
            "~*": lambda: exp.RegexpILike(this=a, expression=b),
            "!~*": lambda: exp.Not(this=exp.RegexpILike(this=a, expression=b)),
            "=": lambda: exp.EQ(this=a, expression=b),
            "<>": lambda: exp.NEQ(this=a, expression=b),
            "!=": lambda: exp.NEQ(this=a, expression=b),
            "<": lambda: exp.LT(this=a, expression=b),
            "<=": lambda: exp.LTE(this=a, expression=b),
            ">": lambda: exp.GT(this=a, expression=b),
            ">=": lambda: exp.GTE(this=a, expression=b),
            "~~": lambda: exp.Like(this=a, expression=b),
            "!~~": lambda: exp.Not(this=exp.Like(this=a, expression=b)),
            "~~*": lambda: exp.ILike(this=a, expression=b),
            "||": lambda: exp.DPipe(this=a, expression=b),
            "+": lambda: exp.Add(this=a, expression=b),
            "-": lambda: exp.Sub(this=a, expression=b),
        }
        build = builders.get(op)
        if build is None:
            raise UndefinedFunction(f"operator does not exist: {op}")
        return self.post(build())

    def _cast(self, node: exp.Cast) -> exp.Expression:
        name = _type_name(node.to)
        base = name[:-2] if name.endswith("[]") else name
        mapped = _TYPE_MAP.get(base)
        if mapped is None and name != base and "pg_catalog" in node.to.sql("postgres").lower():
            mapped = exp.DataType.build(base, dialect="postgres").sql("duckdb")
        if mapped is None and "pg_catalog" in node.to.sql("postgres").lower():
            mapped = exp.DataType.build(base, dialect="postgres").sql("duckdb")
        if mapped is not None:
            node.set("to", exp.DataType.build(mapped + ("[]" if name != base else ""),
                                              dialect="duckdb"))
        return node

    def _array_text_compare(self, node: exp.Expression) -> exp.Expression:
        for side, other in (("this", "expression"), ("expression", "this")):
            lit = node.args.get(side)
            if (isinstance(lit, exp.Literal) and lit.is_string
                    and re.fullmatch(r"\{.*\}", lit.this, re.S)
                    and not isinstance(node.args.get(other), exp.Literal)):
                items = [i.strip().strip('"') for i in lit.this[1:-1].split(",") if i.strip()]
                elems: list[exp.Expression] = [
                    _lit(int(i)) if re.fullmatch(r"-?\d+", i) else _lit(i) for i in items]
                node.set(side, exp.Array(expressions=elems))
        return node

    # -- functions ----------------------------------------------------------------------------

    def _function(self, name: str, args: list[exp.Expression],
                  node: exp.Expression) -> exp.Expression:
        handler = _FUNCS.get(name)
        if handler is not None:
            return handler(self, args)
        if name.startswith("sdb_"):
            return node
        # A pg_catalog-qualified builtin parsed as an anonymous call: let sqlglot's Postgres
        # parser build its proper node (array_agg, string_agg, ...) so transpiling maps it.
        builder = Postgres.Parser.FUNCTIONS.get(name.upper())
        if builder is not None and isinstance(node, exp.Anonymous):
            try:
                built = builder(args) if not _wants_dialect(builder) else builder(
                    args, Postgres())
            except Exception:  # noqa: BLE001 - keep the anonymous call
                return node
            if isinstance(built, exp.Expression):
                return built
        return node

    # inline helpers used by _FUNCS

    def user(self) -> exp.Expression:
        return _lit(self.session.user)

    def pg_get_userbyid(self, args: list[exp.Expression]) -> exp.Expression:
        x = args[0]
        unknown = exp.DPipe(this=exp.DPipe(this=_lit("unknown (OID="), expression=exp.Cast(
            this=x.copy(), to=exp.DataType.build("VARCHAR"))), expression=_lit(")"))
        return exp.Case(ifs=[
            exp.If(this=exp.Is(this=x.copy(), expression=exp.Null()), true=_null()),
            *(exp.If(this=exp.EQ(this=x.copy(), expression=_lit(role.oid)), true=_lit(role.name))
              for role in self.catalog.roles())], default=unknown)

    def has_table_privilege(self, args: list[exp.Expression]) -> exp.Expression:
        """Answered from the catalog when the arguments are constants (as psql and tools pass
        them); TRUE otherwise, as before roles existed."""
        if len(args) not in (2, 3) or not all(isinstance(a, exp.Literal) for a in args):
            return exp.Boolean(this=True)
        user = args[0].name if len(args) == 3 else self.session.user
        table, wanted = args[-2], args[-1].name
        if table.is_string:
            name = table.name.rsplit(".", 1)[-1]  # public.t
            rel = self.catalog.get(name.strip('"') if name.startswith('"') else name.lower())
        else:
            rel = self.catalog.by_id(int(table.name) - FIRST_USER_OID)
        if rel is None:
            return exp.Boolean(this=True)  # a system table: readable by everyone
        privileges = [p.strip().upper().removesuffix(" WITH GRANT OPTION") for p in wanted.split(",")]
        return exp.Boolean(this=any(self.catalog.has_privilege(user, rel, p) for p in privileges))

    def pg_table_is_visible(self, args: list[exp.Expression]) -> exp.Expression:
        x = args[0]
        hidden = [oid for key, oid in sc.SYSTEM_TABLE_OIDS.items()
                  if key.startswith("information_schema.")]
        for rel in self.catalog.relations.values():
            if rel.schema != "public":
                hidden.append(rel.oid)
                if sc.has_pkey(rel):
                    hidden.append(sc.index_oid(rel))
        cond: exp.Expression = exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))
        if hidden:
            cond = exp.And(this=cond, expression=exp.Not(this=exp.In(
                this=x.copy(), expressions=[_lit(o) for o in sorted(hidden)])))
        return exp.Paren(this=cond)

    def by_relation(self, x: exp.Expression, value: Callable[..., str | None],
                    key: Callable[..., int]) -> exp.Expression:
        pairs: list[tuple[exp.Expression, exp.Expression]] = []
        for rel in sorted(self.catalog.relations.values(), key=lambda r: r.id):
            v = value(rel)
            if v is not None:
                pairs.append((_lit(key(rel)), _lit(v)))
        return _case(x, pairs, _null())

    def pg_get_indexdef(self, args: list[exp.Expression]) -> exp.Expression:
        x = args[0]
        declared = sc.user_indexes(self.catalog)  # CREATE INDEX's, after the primary keys'
        full = _case(x, [*((_lit(sc.index_oid(r)), _lit(sc.index_def(r)))
                           for r in sorted(self.catalog.relations.values(), key=lambda r: r.id) if sc.has_pkey(r)),
                         *((_lit(i.oid), _lit(sc.user_index_def(i, r))) for i, r in declared)], _null())
        if len(args) < 2:
            return full
        col = args[1]
        ifs: list[exp.Expression] = [exp.If(this=exp.EQ(this=col.copy(), expression=_lit(0)),
                                            true=full)]
        for rel in self.catalog.relations.values():
            if not sc.has_pkey(rel):
                continue
            for i, c in enumerate(rel.primary_key, start=1):
                ifs.append(exp.If(this=exp.And(
                    this=exp.EQ(this=x.copy(), expression=_lit(sc.index_oid(rel))),
                    expression=exp.EQ(this=col.copy(), expression=_lit(i))),
                    true=_lit(sc.quote_ident(c))))
        for index, _ in declared:
            for i, name in enumerate([*(c.name for c in index.columns), *sc.index_include(index)], start=1):
                ifs.append(exp.If(this=exp.And(
                    this=exp.EQ(this=x.copy(), expression=_lit(index.oid)),
                    expression=exp.EQ(this=col.copy(), expression=_lit(i))),
                    true=_lit(sc.quote_ident(name))))
        return exp.Case(ifs=ifs, default=_null())

    def pg_get_viewdef(self, args: list[exp.Expression]) -> exp.Expression:
        x = args[0]
        views = [r for r in self.catalog.relations.values()
                 if r.kind in ("view", "materialized_view")]
        if self._is_textual(x):
            key: Callable[..., object] = lambda r: r.name  # noqa: E731
            subject: exp.Expression = exp.Cast(this=x, to=exp.DataType.build("VARCHAR"))
        else:
            key = lambda r: r.oid  # noqa: E731
            subject = x
        return _case(subject, [(_lit(key(r)), _lit(sc.view_definition(r)))  # type: ignore[arg-type]
                               for r in sorted(views, key=lambda r: r.id)], _null())

    def current_setting(self, args: list[exp.Expression]) -> exp.Expression:
        settings = sc.default_settings(self.session)
        x = args[0]
        if isinstance(x, exp.Literal) and x.is_string:
            name = x.this.lower()
            if name in settings:
                return _lit(settings[name])
            missing_ok = len(args) > 1 and isinstance(args[1], exp.Boolean) and args[1].this
            if missing_ok:
                return _null()
            raise UndefinedObject(f'unrecognized configuration parameter "{x.this}"')
        return _case(exp.Lower(this=exp.Cast(this=x, to=exp.DataType.build("VARCHAR"))),
                     [(_lit(k), _lit(v)) for k, v in sorted(settings.items())], _null())

    def to_reg(self, kind: str, args: list[exp.Expression]) -> exp.Expression:
        x = args[0]
        if isinstance(x, exp.Literal) and x.is_string:
            try:
                oid = self._reg_literal_oid(kind, x.this)
            except (UndefinedTable, UndefinedObject, UndefinedFunction):
                return _null("BIGINT")
            return _lit(oid) if oid is not None else _null("BIGINT")
        return self._reg_to_oid(kind, x)


_TYPED_NAMES = {
    "CurrentUser": "current_user", "SessionUser": "session_user",
    "CurrentSchema": "current_schema", "CurrentSchemas": "current_schemas",
    "CurrentVersion": "version", "CurrentDatabase": "current_database",
    "CurrentCatalog": "current_catalog", "CurrentRole": "current_role",
}


def postgres_output_name(node: exp.Expression) -> str:
    """The column name Postgres gives an unaliased select-list expression (best effort)."""
    if isinstance(node, exp.Alias):
        return node.alias
    named = (getattr(node, "_meta", None) or {}).get("sql_name")  # a user function's call (planner/functions.py)
    if named:
        return str(named)
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Dot) and not isinstance(node.expression, exp.Identifier):
        return postgres_output_name(node.expression)
    if isinstance(node, exp.Cast):
        inner = postgres_output_name(node.this)
        if inner != "?column?":
            return inner
        name = _type_name(node.to)
        return {"integer": "int4", "int": "int4", "bigint": "int8", "smallint": "int2",
                "boolean": "bool", "character varying": "varchar"}.get(name, name)
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select):
        projections = node.this.expressions
        return postgres_output_name(projections[0]) if len(projections) == 1 else "?column?"
    if isinstance(node, exp.Array) and node.find(exp.Select):
        return "array"
    if type(node).__name__ in _TYPED_NAMES:
        return _TYPED_NAMES[type(node).__name__]
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return "?column?"


def _wants_dialect(builder: Callable[..., object]) -> bool:
    code = getattr(builder, "__code__", None)
    return code is not None and code.co_argcount >= 2


def _arg(args: list[exp.Expression], i: int) -> exp.Expression:
    return args[i] if i < len(args) else exp.Null()


_Handler = Callable[[_Rewriter, list[exp.Expression]], exp.Expression]


def _const(value: Callable[[_Rewriter], exp.Expression]) -> _Handler:
    return lambda rw, args: value(rw)


_TRUE: _Handler = _const(lambda rw: exp.Boolean(this=True))
_FALSE: _Handler = _const(lambda rw: exp.Boolean(this=False))
_NULL_TEXT: _Handler = _const(lambda rw: _null())
_ZERO_BIGINT: _Handler = _const(lambda rw: exp.Cast(this=_lit(0), to=exp.DataType.build("BIGINT")))


def _current_schemas(rw: _Rewriter, args: list[exp.Expression]) -> exp.Expression:
    with_implicit = exp.Array(expressions=[_lit("pg_catalog"), _lit("public")])
    plain = exp.Array(expressions=[_lit("public")])
    flag = _arg(args, 0)
    if isinstance(flag, exp.Boolean):
        return with_implicit if flag.this else plain
    return exp.Case(ifs=[exp.If(this=flag, true=with_implicit)], default=plain)


def _macro(name: str, nargs: int) -> _Handler:
    def build(rw: _Rewriter, args: list[exp.Expression]) -> exp.Expression:
        padded = [_arg(args, i) for i in range(nargs)]
        return _call(name, *padded)
    return build


def _not_null(rw: _Rewriter, args: list[exp.Expression]) -> exp.Expression:
    return exp.Paren(this=exp.Not(this=exp.Is(this=_arg(args, 0), expression=exp.Null())))


_FUNCS: dict[str, _Handler] = {
    "version": _const(lambda rw: _lit(version_string())),
    "current_database": _const(lambda rw: _lit(rw.session.database)),
    "current_catalog": _const(lambda rw: _lit(rw.session.database)),
    "current_schema": _const(lambda rw: _lit("public")),
    "current_schemas": _current_schemas,
    "current_user": _const(lambda rw: rw.user()),
    "session_user": _const(lambda rw: rw.user()),
    "current_role": _const(lambda rw: rw.user()),
    "user": _const(lambda rw: rw.user()),
    "getpgusername": _const(lambda rw: rw.user()),
    "pg_backend_pid": _const(lambda rw: _lit(rw.session.backend_pid)),
    "inet_server_addr": _const(lambda rw: _lit("127.0.0.1")),
    "inet_server_port": _const(lambda rw: _null("INTEGER")),
    "inet_client_addr": _const(lambda rw: _null()),
    "inet_client_port": _const(lambda rw: _null("INTEGER")),
    "pg_postmaster_start_time": _macro("sdb_pg_postmaster_start_time", 0),
    "pg_conf_load_time": _macro("sdb_pg_postmaster_start_time", 0),
    "txid_current": _macro("sdb_txid_current", 0),
    "pg_current_xact_id": _macro("sdb_txid_current", 0),
    "pg_is_in_recovery": _FALSE,
    # Runs on the embedded engine only; a statement timeout or cancel request wakes it.
    "pg_sleep": _macro("sdb_pg_sleep", 1),
    "obj_description": _NULL_TEXT,
    "col_description": _NULL_TEXT,
    "shobj_description": _NULL_TEXT,
    "has_table_privilege": lambda rw, args: rw.has_table_privilege(args),
    "has_schema_privilege": _TRUE,
    "has_database_privilege": _TRUE,
    "has_column_privilege": _TRUE,
    "has_any_column_privilege": _TRUE,
    "has_sequence_privilege": _TRUE,
    "has_function_privilege": _TRUE,
    "pg_has_role": _TRUE,
    "pg_encoding_to_char": _macro("sdb_pg_encoding_to_char", 1),
    # The bytes of a text's UTF-8 (the embedded engine's octet_length takes only blobs).
    "octet_length": lambda rw, args: exp.Cast(this=_call("strlen", _arg(args, 0)), to=exp.DataType.build("INT")),
    "pg_char_to_encoding": _const(lambda rw: _lit(sc.UTF8_ENCODING)),
    "pg_get_userbyid": lambda rw, args: rw.pg_get_userbyid(args),
    "pg_table_is_visible": lambda rw, args: rw.pg_table_is_visible(args),
    "pg_type_is_visible": _not_null,
    "pg_function_is_visible": _not_null,
    "pg_collation_is_visible": _not_null,
    "pg_opclass_is_visible": _not_null,
    "pg_conversion_is_visible": _not_null,
    "pg_statistics_obj_is_visible": _not_null,
    "format_type": _macro("sdb_format_type", 2),
    "pg_get_expr": lambda rw, args: exp.Cast(this=_arg(args, 0),
                                             to=exp.DataType.build("VARCHAR")),
    "pg_get_constraintdef": lambda rw, args: rw.by_relation(
        _arg(args, 0), lambda r: sc.constraint_def(r) if sc.has_pkey(r) else None,
        sc.constraint_oid),
    "pg_get_indexdef": lambda rw, args: rw.pg_get_indexdef(args),
    "pg_get_viewdef": lambda rw, args: rw.pg_get_viewdef(args),
    "pg_get_ruledef": _NULL_TEXT,
    "pg_get_triggerdef": _NULL_TEXT,
    "pg_get_functiondef": _NULL_TEXT,
    # From the functions pg_proc lists (system_catalog.PROCS), as psql's \\df shows them.
    # The user's functions (CREATE FUNCTION) as PostgreSQL prints them.
    "pg_get_function_result": lambda rw, args: _case(_arg(args, 0), [
        *((_lit(9000 + i), _lit(sc.format_type(ret) or "")) for i, (_, ret, _) in enumerate(sc.PROCS)),
        *((_lit(f.oid), _lit(str(dict(f.extra).get("returns", "")))) for f in rw.catalog.objects_of("function"))],
        _null()),
    "pg_get_function_arguments": lambda rw, args: _case(_arg(args, 0), [
        *((_lit(9000 + i), _lit(", ".join(["text"] * nargs))) for i, (_, _, nargs) in enumerate(sc.PROCS)),
        *((_lit(f.oid), _lit(", ".join(c.type.spelled() if c.name.startswith("$") else f"{c.name} {c.type.spelled()}"
                                       for c in f.columns))) for f in rw.catalog.objects_of("function"))],
        _null()),
    "pg_get_function_identity_arguments": _NULL_TEXT,
    "pg_get_statisticsobjdef_columns": _NULL_TEXT,
    "pg_get_partkeydef": _NULL_TEXT,
    "pg_get_partition_constraintdef": _NULL_TEXT,
    "pg_get_serial_sequence": _NULL_TEXT,
    "pg_relation_is_publishable": _FALSE,
    "pg_tablespace_location": _const(lambda rw: _lit("")),  # both tablespaces are built in
    "pg_size_pretty": _macro("sdb_pg_size_pretty", 1),
    "pg_table_size": _ZERO_BIGINT,
    "pg_relation_size": _ZERO_BIGINT,
    "pg_total_relation_size": _ZERO_BIGINT,
    "pg_indexes_size": _ZERO_BIGINT,
    "pg_database_size": _ZERO_BIGINT,
    "array_to_string": _macro("sdb_array_to_string", 2),
    "array_upper": _macro("sdb_array_upper", 2),
    "array_lower": _macro("sdb_array_lower", 2),
    "array_length": _macro("sdb_array_length", 2),
    "json_build_object": lambda rw, args: _call("json_object", *args),
    "jsonb_build_object": lambda rw, args: _call("json_object", *args),
    "current_setting": lambda rw, args: rw.current_setting(args),
    "set_config": lambda rw, args: exp.Cast(this=_arg(args, 1),
                                            to=exp.DataType.build("VARCHAR")),
    "to_regclass": lambda rw, args: rw.to_reg("regclass", args),
    "to_regtype": lambda rw, args: rw.to_reg("regtype", args),
    "to_regnamespace": lambda rw, args: rw.to_reg("regnamespace", args),
    # A set-returning function of (x, n) rows; DuckDB unnests side by side as Postgres does.
    "_pg_expandarray": lambda rw, args: exp.Unnest(
        expressions=[_call("sdb_pg_expandarray", _arg(args, 0))]),
}


def _simple(name: str) -> Callable[[_Rewriter, exp.Expression], exp.Expression]:
    def handle(rw: _Rewriter, node: exp.Expression) -> exp.Expression:
        args = [a for a in node.args.values() if isinstance(a, exp.Expression)]
        return _FUNCS[name](rw, args)
    return handle


# sqlglot parses some Postgres functions into typed nodes rather than Anonymous.
_SIMPLE_FUNCS: dict[type[exp.Expression], Callable[[_Rewriter, exp.Expression], exp.Expression]] = {
    exp.CurrentUser: _simple("current_user"),
    exp.SessionUser: _simple("session_user"),
    exp.CurrentSchema: _simple("current_schema"),
    exp.CurrentSchemas: _simple("current_schemas"),
    exp.CurrentVersion: _simple("version"),
}


def _as_integer(_rewriter: _Rewriter, node: exp.Expression) -> exp.Expression:
    """PostgreSQL's integer results that DuckDB makes bigint."""
    return exp.Cast(this=node, to=exp.DataType.build("INTEGER"))


# length(), position() and grouping() are integer in PostgreSQL (Spark's are too).
for _integer_fn in (exp.Length, exp.StrPosition, exp.Grouping):
    _SIMPLE_FUNCS[_integer_fn] = _as_integer
for _name, _fn in (("CurrentRole", "current_role"), ("CurrentDatabase", "current_database"),
                   ("CurrentCatalog", "current_catalog")):
    _cls = getattr(exp, _name, None)
    if isinstance(_cls, type):
        _SIMPLE_FUNCS[_cls] = _simple(_fn)


class EmbeddedDuckDB(DuckDB):
    """DuckDB as the embedded engine runs it: its connection sorts NULLs as PostgreSQL does
    (default_null_order = nulls_last_on_asc_first_on_desc, runtime/embedded.py), so SQL written
    for it keeps an explicit NULLS FIRST or LAST wherever that differs. With DuckDB's own default
    assumed, `ORDER BY x DESC NULLS LAST` lost its NULLS LAST and put the NULLs first."""

    NULL_ORDERING = "nulls_are_large"


def rewrite_for_duckdb(ast: exp.Expression, ctx: PlanContext) -> exp.Expression:
    """Postgres system functions/casts/operators -> DuckDB (see the module docstring).

    Mutates and returns `ast` (pass a copy to keep the original). Raises UndefinedTable for
    `'x'::regclass` naming no relation.
    """
    return _nonzero_series_steps(_Rewriter(ctx).rewrite(ast))


def _nonzero_series_steps(ast: exp.Expression) -> exp.Expression:
    """generate_series(a, b, 0) is an error in Postgres (22023); DuckDB gives no rows."""
    for series in list(ast.find_all(exp.GenerateSeries, exp.ExplodingGenerateSeries)):
        step = series.args.get("step")
        if step is None or (isinstance(step, exp.Literal) and step.is_number and float(step.this) != 0):
            continue
        checked = exp.Case(ifs=[exp.If(this=exp.EQ(this=step.copy(), expression=exp.Literal.number(0)),
                                       true=_call("error", _lit(ZERO_STEP)))], default=step.copy())
        series.set("step", checked)
    return ast


ZERO_STEP = "step size cannot equal zero"
