"""The catalog's data model: plain frozen data, shared by planner and runtime.

Persistence lives in streamdb/runtime/catalog_store.py; this module only
describes what a relation is, so that planning can stay pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from streamdb.types import SqlType, type_from_name

# Connectors and sinks are catalog objects beside the relations (their own namespaces): they
# hold no rows and never appear where relations are listed (pg_class, SHOW TABLES, ...).
RelationKind = Literal["stream", "table", "view", "materialized_view", "connector", "sink", "function", "index"]
OBJECT_KINDS = ("connector", "sink", "function", "index")
ColumnRole = Literal["KEY", "HEADERS", "HEADER"]

# Relation OIDs start where Postgres starts user objects, so tools see familiar numbers.
FIRST_USER_OID = 16384
PUBLIC_SCHEMA = "public"
PUBLIC_SCHEMA_OID = 2200

# Roles. The bootstrap superuser always exists (with Postgres's OID for it); other roles get
# OIDs from FIRST_ROLE_OID on, apart from relation OIDs.
BOOTSTRAP_ROLE = "streamdb"
BOOTSTRAP_ROLE_OID = 10
FIRST_ROLE_OID = 1_000_000
PUBLIC_GRANTEE = "public"  # GRANT ... TO PUBLIC: every role
# Table privileges; ALL means all of them. UPDATE and DELETE are their own privileges, as in Postgres.
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
PRIVILEGE_LETTERS = {"SELECT": "r", "INSERT": "a", "UPDATE": "w", "DELETE": "d"}  # aclitem letters
# The `extra` key of a push query's materialized view (docs/views.md, "Push queries").
TRANSIENT = "transient"


@dataclass(frozen=True, slots=True)
class ColumnDef:
    name: str
    type: SqlType
    nullable: bool = True
    role: ColumnRole | None = None  # stream columns: KEY, HEADERS or HEADER('k')
    header_key: str | None = None
    default_sql: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "type": self.type.spelled(), "nullable": self.nullable,
            "role": self.role, "header_key": self.header_key, "default_sql": self.default_sql,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> ColumnDef:
        t = type_from_name(d["type"])
        assert t is not None, d["type"]
        return ColumnDef(d["name"], t, d.get("nullable", True), d.get("role"), d.get("header_key"),
                         d.get("default_sql"))


@dataclass(frozen=True, slots=True)
class RelationDef:
    id: int
    name: str
    kind: RelationKind
    columns: tuple[ColumnDef, ...]
    schema: str = PUBLIC_SCHEMA
    primary_key: tuple[str, ...] = ()
    # A stream declared without columns: events are JSON objects, columns are their keys.
    # `columns` then holds the columns observed so far (widened as events arrive).
    schemaless: bool = False
    timestamp_column: str | None = None  # event-time column; None => ROWTIME is arrival time
    partitions: int = 1
    value_format: str = "json"
    options: tuple[tuple[str, str], ...] = ()  # remaining WITH options, as given
    create_sql: str = ""
    created_at: float = 0.0
    depends_on: tuple[int, ...] = ()
    extra: tuple[tuple[str, Any], ...] = field(default=())  # later issues' per-kind settings
    owner: str = BOOTSTRAP_ROLE  # the creating role; catalogs from before roles: the bootstrap role
    grants: tuple[tuple[str, str], ...] = ()  # (role, privilege) granted by GRANT, sorted

    @property
    def oid(self) -> int:
        return FIRST_USER_OID + self.id

    @property
    def shown_kind(self) -> str:
        """What users see: a stream or table derived by CREATE STREAM/TABLE AS SELECT is maintained
        as a materialized view but shows, lists and drops as a stream or table."""
        extra = dict(self.extra)
        shown = extra.get("derived") or extra.get("shown_as")
        return str(shown) if shown else self.kind

    @property
    def transient(self) -> bool:
        """A push query's own materialized view: kept while the query runs, never listed."""
        return bool(dict(self.extra).get(TRANSIENT))

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> ColumnDef | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def key_columns(self) -> tuple[str, ...]:
        """Primary key of a table, or the KEY column of a stream."""
        if self.primary_key:
            return self.primary_key
        return tuple(c.name for c in self.columns if c.role == "KEY")

    def with_columns(self, columns: tuple[ColumnDef, ...]) -> RelationDef:
        return replace(self, columns=columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "kind": self.kind, "schema": self.schema,
            "columns": [c.to_json() for c in self.columns], "primary_key": list(self.primary_key),
            "schemaless": self.schemaless, "timestamp_column": self.timestamp_column,
            "partitions": self.partitions, "value_format": self.value_format,
            "options": [list(kv) for kv in self.options], "create_sql": self.create_sql,
            "created_at": self.created_at, "depends_on": list(self.depends_on),
            "extra": [list(kv) for kv in self.extra],
            "owner": self.owner, "grants": [list(g) for g in self.grants],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> RelationDef:
        return RelationDef(
            id=d["id"], name=d["name"], kind=d["kind"], schema=d.get("schema", PUBLIC_SCHEMA),
            columns=tuple(ColumnDef.from_json(c) for c in d["columns"]),
            primary_key=tuple(d.get("primary_key", ())), schemaless=d.get("schemaless", False),
            timestamp_column=d.get("timestamp_column"), partitions=d.get("partitions", 1),
            value_format=d.get("value_format", "json"),
            options=tuple((k, v) for k, v in d.get("options", ())),
            create_sql=d.get("create_sql", ""), created_at=d.get("created_at", 0.0),
            depends_on=tuple(d.get("depends_on", ())),
            extra=tuple((k, v) for k, v in d.get("extra", ())),
            owner=d.get("owner", BOOTSTRAP_ROLE),
            grants=tuple((r, p) for r, p in d.get("grants", ())),
        )


@dataclass(frozen=True, slots=True)
class RoleDef:
    """A role. Its password is never kept: only a SCRAM-SHA-256 verifier (and, when the server
    allows md5 for old clients, the md5 hash), see streamdb/auth.py."""

    name: str
    oid: int
    can_login: bool = False
    superuser: bool = False
    scram_verifier: str | None = None
    md5_hash: str | None = None
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "oid": self.oid, "can_login": self.can_login, "superuser": self.superuser,
                "scram_verifier": self.scram_verifier, "md5_hash": self.md5_hash, "created_at": self.created_at}

    @staticmethod
    def from_json(d: dict[str, Any]) -> RoleDef:
        return RoleDef(d["name"], d["oid"], d.get("can_login", False), d.get("superuser", False),
                       d.get("scram_verifier"), d.get("md5_hash"), d.get("created_at", 0.0))


BOOTSTRAP = RoleDef(BOOTSTRAP_ROLE, BOOTSTRAP_ROLE_OID, can_login=True, superuser=True)


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """An immutable view of the catalog at one version; planning reads only this."""

    version: int
    relations: dict[str, RelationDef]  # by lower-case name (schema public)
    objects: dict[str, RelationDef] = field(default_factory=dict)  # connectors, sinks: by "<kind>:<name>"
    # Roles by name: a field of their own rather than "role" objects, since a role is not a
    # RelationDef (no columns, no id in the relation id space) and is looked up on every login.
    stored_roles: dict[str, RoleDef] = field(default_factory=dict)
    # Push queries' materialized views, by name: maintained like any view (by_id, the pipelines)
    # but out of `relations`, so no listing, name lookup or DROP of a user's ever meets them.
    transient: dict[str, RelationDef] = field(default_factory=dict)

    def role(self, name: str) -> RoleDef | None:
        """A role by name; the bootstrap superuser exists even before it is ever altered."""
        role = self.stored_roles.get(name)
        if role is None and name == BOOTSTRAP_ROLE:
            return BOOTSTRAP
        return role

    def roles(self) -> list[RoleDef]:
        """Every role, the bootstrap superuser first."""
        rest = sorted((r for r in self.stored_roles.values() if r.name != BOOTSTRAP_ROLE), key=lambda r: r.name)
        return [self.role(BOOTSTRAP_ROLE) or BOOTSTRAP, *rest]

    def has_privilege(self, user: str, rel: RelationDef, privilege: str) -> bool:
        """Owners and superusers have every privilege; others what was granted to them or PUBLIC."""
        role = self.role(user)
        if role is None:
            return False
        if role.superuser or rel.owner == user:
            return True
        return (user, privilege) in rel.grants or (PUBLIC_GRANTEE, privilege) in rel.grants

    def is_owner(self, user: str, rel: RelationDef) -> bool:
        role = self.role(user)
        return role is not None and (role.superuser or rel.owner == user)

    def owned_by(self, user: str) -> list[RelationDef]:
        return [r for r in (*self.relations.values(), *self.objects.values()) if r.owner == user]

    def get(self, name: str) -> RelationDef | None:
        return self.relations.get(name)

    def object(self, kind: str, name: str) -> RelationDef | None:
        return self.objects.get(f"{kind}:{name}")

    def holding_name(self, name: str) -> RelationDef | None:
        """The relation or index (one namespace in PostgreSQL's pg_class) that has `name`."""
        return self.relations.get(name) or self.objects.get(f"index:{name}")

    def objects_of(self, kind: str) -> list[RelationDef]:
        return sorted((o for o in self.objects.values() if o.kind == kind), key=lambda o: o.name)

    def object_by_id(self, obj_id: int) -> RelationDef | None:
        for o in self.objects.values():
            if o.id == obj_id:
                return o
        return None

    def by_id(self, rel_id: int) -> RelationDef | None:
        for r in self.relations.values():
            if r.id == rel_id:
                return r
        for r in self.transient.values():
            if r.id == rel_id:
                return r
        return None

    def with_visible(self, rel: RelationDef) -> CatalogSnapshot:
        """This snapshot with a transient view among the relations, for planning a read of it."""
        return replace(self, relations={**self.relations, rel.name: rel})

    def dependents(self, rel_id: int) -> list[RelationDef]:
        """Relations, then sinks, that depend on a relation or connector. Not its indexes: they
        are part of it, dropped with it (`indexes_of`)."""
        return [r for r in (*self.relations.values(), *self.objects.values())
                if rel_id in r.depends_on and r.kind != "index"]

    def indexes_of(self, rel_id: int) -> list[RelationDef]:
        """The declared indexes (CREATE INDEX) of a relation, by name."""
        return [o for o in self.objects_of("index") if o.depends_on == (rel_id,)]
