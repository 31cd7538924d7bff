"""What a statement's runtime module may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamdb.planner.context import SessionInfo

if TYPE_CHECKING:
    from streamdb.catalog import CatalogSnapshot, RelationDef
    from streamdb.runtime.engine import Engine
    from streamdb.runtime.session import EngineSession


@dataclass
class ExecContext:
    engine: Engine
    session: EngineSession

    @property
    def info(self) -> SessionInfo:
        return self.session.info()


def refuse_if_read_by_others(catalog: CatalogSnapshot, rel: RelationDef, action: str, hint: str) -> None:
    """DependentObjectsStillExist naming every relation or sink that reads `rel`, if any; `action`
    completes "cannot <action> because other objects depend on it"."""
    from streamdb.errors import DependentObjectsStillExist

    dependents = catalog.dependents(rel.id)
    if dependents:
        kind = rel.shown_kind.replace("_", " ")
        raise DependentObjectsStillExist(
            f"cannot {action} because other objects depend on it",
            detail="\n".join(f"{d.kind.replace('_', ' ')} {d.name} depends on {kind} {rel.name}" for d in dependents),
            hint=hint)
