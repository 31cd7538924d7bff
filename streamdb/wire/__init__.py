"""PostgreSQL v3 wire protocol: the asyncio server and value codecs."""

from streamdb.wire.server import WireServer

__all__ = ["WireServer"]
