"""A table's rows written by commits that are queued but not yet durable.

A write by primary key holds the table's lock only while it computes its change and queues its
commit, not while the commit is made durable, so the writes of several sessions to one table
share a group commit (docs/serving.md). The next writer of the table must see those rows as they
will be, before they are durable: it reads them here first, then the store. Any other writer of
the table (an UPDATE over a query, COPY, a source) reads the store alone, so taking the table's
lock waits for the queued commits first (`drain`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

Row = tuple[Any, ...]


class QueuedRows:
    def __init__(self) -> None:
        # key -> (the row as the latest queued commit leaves it, None if deleted; that commit)
        self._rows: dict[bytes, tuple[Row | None, Future[Any]]] = {}
        self._commits: set[Future[Any]] = set()

    @property
    def idle(self) -> bool:
        """Nothing queued."""
        return not self._commits

    def rows(self) -> dict[bytes, Row | None]:
        return {key: row for key, (row, _) in self._rows.items()}

    def queued(self, written: dict[bytes, Row | None], commit: Future[Any], loop: asyncio.AbstractEventLoop) -> None:
        """`written` (key -> row or None) is in `commit`, queued: kept until it is durable or failed."""
        for key, row in written.items():
            self._rows[key] = (row, commit)
        self._commits.add(commit)

        def settled(_: Future[Any]) -> None:
            try:
                loop.call_soon_threadsafe(self._settle, written, commit)
            except RuntimeError:  # the loop is closed: the server is stopping
                pass

        commit.add_done_callback(settled)

    def _settle(self, written: dict[bytes, Row | None], commit: Future[Any]) -> None:
        # Durable: the store has the rows now. Failed: every commit queued after it fails too
        # (Storage.submit_in_order), so none of its rows stays anywhere.
        for key in written:
            entry = self._rows.get(key)
            if entry is not None and entry[1] is commit:
                del self._rows[key]
        self._commits.discard(commit)

    async def drain(self) -> None:
        """Wait until every commit queued so far is durable or failed."""
        if self._commits:
            await asyncio.gather(*(asyncio.shield(asyncio.wrap_future(c)) for c in list(self._commits)),
                                 return_exceptions=True)
