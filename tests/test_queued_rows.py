"""A table's rows in queued commits (runtime/queued_rows.py): seen by the next writer until the
commit is durable or failed, and waited for by a writer that reads the store."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from streamdb.runtime.queued_rows import QueuedRows


def test_rows_stay_until_their_commit_settles_and_the_latest_commit_wins() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        queued = QueuedRows()
        first: Future[int] = Future()
        second: Future[int] = Future()
        assert queued.idle
        queued.queued({b"k1": (1, "a"), b"k2": None}, first, loop)
        queued.queued({b"k1": (1, "b")}, second, loop)
        assert not queued.idle  # a DROP leaves it to the writers (Engine.forget_writes)
        assert queued.rows() == {b"k1": (1, "b"), b"k2": None}
        first.set_result(1)
        await asyncio.sleep(0)  # settled on the loop
        assert queued.rows() == {b"k1": (1, "b")}  # k1 is the second commit's, still queued
        second.set_exception(OSError("disk full"))
        await asyncio.sleep(0)
        assert queued.rows() == {} and queued.idle

    asyncio.run(run())


def test_drain_waits_for_every_queued_commit_and_a_cancelled_drain_cancels_none() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        queued = QueuedRows()
        commit: Future[int] = Future()
        queued.queued({b"k": (1,)}, commit, loop)
        waiter = asyncio.ensure_future(queued.drain())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        waiter.cancel()
        await asyncio.sleep(0)
        assert not commit.cancelled()  # a later commit may build on it: never withdrawn
        drained = asyncio.ensure_future(queued.drain())
        loop.call_later(0.01, commit.set_result, 1)
        await asyncio.wait_for(drained, 1)
        await asyncio.sleep(0)
        assert queued.rows() == {}
        await queued.drain()  # nothing queued: at once

    asyncio.run(run())
