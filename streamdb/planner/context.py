"""What planning may look at: an immutable catalog snapshot and the session's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamdb.catalog import CatalogSnapshot

SERVER_VERSION = "15.0 (StreamDB 0.1.0)"
SERVER_VERSION_NUM = "150000"
DATABASE_NAME = "streamdb"


@dataclass(frozen=True)
class SessionInfo:
    user: str
    database: str
    application_name: str = ""
    settings: dict[str, str] = field(default_factory=dict)  # lower-case name -> value
    backend_pid: int = 0


@dataclass(frozen=True)
class PlanContext:
    catalog: CatalogSnapshot
    session: SessionInfo
