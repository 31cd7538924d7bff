"""What a statement's runtime module may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streamdb.planner.context import SessionInfo

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine
    from streamdb.runtime.session import EngineSession


@dataclass
class ExecContext:
    engine: Engine
    session: EngineSession

    @property
    def info(self) -> SessionInfo:
        return self.session.info()
