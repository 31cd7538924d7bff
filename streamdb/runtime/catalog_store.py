"""The durable catalog: relation definitions in the storage's "catalog" store.

Every change is one atomic storage commit that also bumps the catalog version,
so a crash leaves either the old or the new catalog. DDL is serialized by the
engine's DDL lock; readers take immutable snapshots.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from streamdb import udf
from streamdb.catalog import OBJECT_KINDS, CatalogSnapshot, RelationDef, RoleDef
from streamdb.errors import DuplicateTable
from streamdb.storage.base import Commit, Snapshot, Storage

CATALOG = "catalog"
META = "meta"
META_KEY = b"catalog"
OBJECT_PREFIX = b"\x00object:"  # connectors and sinks: b"\x00object:<kind>:<name>"
ROLE_PREFIX = b"\x00role:"  # roles: b"\x00role:<name>"
TRANSIENT_PREFIX = b"\x00transient:"  # push queries' views: b"\x00transient:<name>"


def _key(rel: RelationDef) -> bytes:
    if rel.kind in OBJECT_KINDS:
        return OBJECT_PREFIX + f"{rel.kind}:{rel.name}".encode()
    return TRANSIENT_PREFIX + rel.name.encode() if rel.transient else rel.name.encode()
FORMAT_VERSION = 1


def pending_drop_key(rel_id: int) -> bytes:
    """META's mark of a relation out of the catalog whose data is still kept (a replaced view's,
    for a grace period): the commit that drops the data removes it."""
    return f"pending-drop:{rel_id}".encode()


def stored_in(snap: Snapshot, rel: RelationDef) -> bool:
    """Whether the data of `rel` is in a storage snapshot: it is while the snapshot's catalog
    holds this relation (not another of its name: a DROP removes both in one commit), or while
    it is a replaced view's whose drop is pending."""
    raw = snap.get(CATALOG, _key(rel))
    if raw is not None and json.loads(raw).get("id") == rel.id:
        return True
    return snap.get(META, pending_drop_key(rel.id)) is not None


class CatalogStore:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        relations: dict[str, RelationDef] = {}
        objects: dict[str, RelationDef] = {}
        roles: dict[str, RoleDef] = {}
        transient: dict[str, RelationDef] = {}
        with storage.snapshot() as snap:
            meta_raw = snap.get(META, META_KEY)
            for key, value in snap.scan(CATALOG):
                if key.startswith(ROLE_PREFIX):
                    role = RoleDef.from_json(json.loads(value))
                    roles[role.name] = role
                    continue
                rel = RelationDef.from_json(json.loads(value))
                if key.startswith(OBJECT_PREFIX):
                    objects[key[len(OBJECT_PREFIX):].decode()] = rel
                elif key.startswith(TRANSIENT_PREFIX):
                    transient[rel.name] = rel
                else:
                    relations[key.decode()] = rel
        meta = json.loads(meta_raw) if meta_raw else {"next_id": 1, "version": 0, "format": FORMAT_VERSION}
        self._next_id: int = meta["next_id"]
        self._snapshot = CatalogSnapshot(meta["version"], relations, objects, roles, transient)
        self._replaced: dict[int, RelationDef] = {}
        # Called after each change is installed (from any thread): the view maintainer looks again,
        # so a push query whose view a DROP took ends at once, not at the next write.
        self.listeners: list[Callable[[], None]] = []
        _define_functions(self._snapshot)

    def snapshot(self) -> CatalogSnapshot:
        return self._snapshot

    # A replaced view's definition, kept while its rows stay for its grace period: a read planned
    # just before the swap still names it, and reads its rows (create_relation.drop_pending).
    def keep_replaced(self, rel: RelationDef) -> None:
        self._replaced[rel.id] = rel

    def forget_replaced(self, rel_id: int) -> None:
        self._replaced.pop(rel_id, None)

    def by_id(self, rel_id: int) -> RelationDef | None:
        """A relation of the current catalog, or a replaced view still in its grace period."""
        return self._snapshot.by_id(rel_id) or self._replaced.get(rel_id)

    def _meta_put(self, version: int, next_id: int) -> tuple[str, bytes, bytes]:
        meta = {"next_id": next_id, "version": version, "format": FORMAT_VERSION}
        return (META, META_KEY, json.dumps(meta).encode())

    def plan_change(self, *, add: list[RelationDef] = (), remove: list[RelationDef] = (),  # type: ignore[assignment]
                    update: list[RelationDef] = (),  # type: ignore[assignment]
                    rename: list[tuple[RelationDef, RelationDef]] = (),  # type: ignore[assignment]
                    put_roles: list[RoleDef] = (), remove_roles: list[RoleDef] = (),  # type: ignore[assignment]
                    ) -> tuple[Commit, list[RelationDef], CatalogSnapshot]:
        """A commit for a catalog change and the snapshot it produces (applied by `applied`).
        `rename`: (relation as it is, the same relation under its new name); its data stays."""
        commit = Commit()
        next_id = self._next_id
        relations = dict(self._snapshot.relations)
        objects = dict(self._snapshot.objects)
        transient = dict(self._snapshot.transient)
        added = []

        def place(rel: RelationDef) -> dict[str, RelationDef]:
            return objects if rel.kind in OBJECT_KINDS else transient if rel.transient else relations

        # A push query's view goes with anything it reads that is dropped or renamed (its query
        # names it): the push query then ends with an error (ViewMaintainer._advance).
        gone = {r.id for r in (*remove, *(old for old, _ in rename))}
        remove = [*remove, *(t for t in transient.values() if gone & set(t.depends_on) and t not in remove)]
        # A relation's indexes go with it (a rename keeps them: they hold its id, not its name).
        dropped, kept = {r.id for r in remove}, {o.name for o in update if o.kind == "index"}
        remove = [*remove, *(o for o in objects.values() if o.kind == "index" and dropped & set(o.depends_on)
                             and o not in remove and o.name not in kept)]

        def name_in(rel: RelationDef) -> str:
            return f"{rel.kind}:{rel.name}" if rel.kind in OBJECT_KINDS else rel.name

        for rel in remove:
            place(rel).pop(name_in(rel), None)
            commit.deletes.append((CATALOG, _key(rel)))
            if rel.kind in OBJECT_KINDS:
                commit.deletes.append((META, f"sink:{rel.id}".encode()))  # a sink's progress, if any
                continue
            commit.deletes.append((META, f"view:{rel.id}".encode()))  # a view's progress, if any
            commit.deletes.append((META, f"wm:{rel.id}".encode()))  # a stream's watermark, if any
            commit.drop_relations.append(rel.id)
        # An index's name is a relation's name too (pg_class): a relation cannot take it.
        for rel in (*add, *(new for _, new in rename)):
            index = objects.get(f"index:{rel.name}")
            if rel.kind not in OBJECT_KINDS and index is not None and index not in remove:
                raise DuplicateTable(f'relation "{rel.name}" already exists', detail=f'"{rel.name}" is an index.')
        for rel in add:
            if rel.id == 0:
                rel = replace(rel, id=next_id)
                next_id += 1
            added.append(rel)
            place(rel)[name_in(rel)] = rel
            commit.puts.append((CATALOG, _key(rel), json.dumps(rel.to_json()).encode()))
        for old, new in rename:
            place(old).pop(name_in(old), None)
            commit.deletes.append((CATALOG, _key(old)))
            place(new)[name_in(new)] = new
            commit.puts.append((CATALOG, _key(new), json.dumps(new.to_json()).encode()))
        for rel in update:
            place(rel)[name_in(rel)] = rel
            commit.puts.append((CATALOG, _key(rel), json.dumps(rel.to_json()).encode()))
        roles = dict(self._snapshot.stored_roles)
        for role in remove_roles:
            roles.pop(role.name, None)
            commit.deletes.append((CATALOG, ROLE_PREFIX + role.name.encode()))
        for role in put_roles:
            roles[role.name] = role
            commit.puts.append((CATALOG, ROLE_PREFIX + role.name.encode(), json.dumps(role.to_json()).encode()))
        # Every change, GRANT and REVOKE and role changes included, bumps the version: sessions key
        # their cached statements and plans (privileges checked when planned) by it.
        version = self._snapshot.version + 1
        commit.puts.append(self._meta_put(version, next_id))
        # A commit applies its puts before its deletes: a name removed and given to another
        # relation in the same change (OR REPLACE, a rename onto a replaced name) must keep the put.
        put_keys = {(store, key) for store, key, _ in commit.puts}
        commit.deletes = [d for d in commit.deletes if d not in put_keys]
        return commit, added, CatalogSnapshot(version, relations, objects, roles, transient)

    def applied(self, snapshot: CatalogSnapshot) -> None:
        """Install the snapshot of a change whose commit is durable."""
        self._next_id = max(self._next_id, max((r.id for r in (*snapshot.relations.values(),
                                                               *snapshot.objects.values(),
                                                               *snapshot.transient.values())), default=0) + 1)
        self._snapshot = snapshot
        _define_functions(snapshot)
        for listener in self.listeners:
            listener()


def _define_functions(snapshot: CatalogSnapshot) -> None:
    """Make the catalog's Python functions callable by the engines, before any plan stored at an
    earlier start (a view's) calls them."""
    for obj in snapshot.objects_of("function"):
        if dict(obj.extra).get("language") != "sql":  # SQL functions are inlined into their callers
            udf.define(udf.FunctionDef.from_object(obj))
