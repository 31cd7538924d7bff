"""The storage interface: a bytes-level log of change batches plus key/value stores.

Every relation is a collection of changes. The storage layer keeps, per
(relation, partition), an append-only log of *batches*: each batch is one opaque
payload (the runtime encodes it as Arrow IPC) holding ``count`` change records
that take the consecutive offsets ``[first, first + count)``. Next to the log it
keeps free-form key/value *stores* ("catalog", "meta", "state:<relation id>", ...)
for table state and metadata. Storage never looks inside payloads, keys or values.

One ``Commit`` groups appends, puts, deletes and relation drops; it is applied
atomically and durably (all or nothing, fsync'd before ``commit`` returns).
Offsets and the storage-wide commit sequence number are assigned by storage at
commit time. Readers use ``Snapshot``: a consistent point-in-time view that sees
either all of a commit or none of it.

Nothing here is specific to RocksDB: a Kafka-backed log implements the same
interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType


@dataclass(frozen=True)
class Append:
    """One encoded batch of ``count`` change records appended to a partition's log."""

    relation_id: int
    partition: int
    payload: bytes  # one encoded batch of `count` change records
    count: int  # records in the batch; they take offsets [first, first+count)
    # The sum of the records' weights, when the writer knows it (a view's changes). A storage may
    # keep a running sum per partition from it (`Snapshot.weight_sum`), so that counting a view's
    # rows reads no log; an append without it leaves the sum where it was.
    weights: int | None = None


@dataclass
class Commit:
    """Everything applied atomically by one ``Storage.commit`` call.

    Within one commit the operations are applied in this order: ``drop_relations``
    first, then ``appends``, then ``puts``, then ``deletes`` (each list in order).
    So a key both put and deleted in the same commit ends up deleted, and appends
    to a relation dropped in the same commit start again at offset 0.
    """

    appends: list[Append] = field(default_factory=list)
    puts: list[tuple[str, bytes, bytes]] = field(default_factory=list)  # (store, key, value)
    deletes: list[tuple[str, bytes]] = field(default_factory=list)  # (store, key)
    # delete every batch of these relations (all partitions) and their stores "state:<id>" and
    # "partials:<id>"
    drop_relations: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CommitResult:
    first_offsets: list[int]  # first offset assigned to each Append, same order
    sequence: int  # monotonically increasing commit sequence number (storage-wide)


def state_store(relation_id: int) -> str:
    """Name of the store holding the state of a relation (dropped with it)."""
    return f"state:{relation_id}"


def partials_store(relation_id: int) -> str:
    """Name of the store holding a view's partial aggregates per group (dropped with it)."""
    return f"partials:{relation_id}"


class Snapshot(ABC):
    """A consistent point-in-time read view; use as a context manager or close()."""

    @abstractmethod
    def read(
        self, relation_id: int, partition: int, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, int, bytes]]:
        """(first_offset, count, payload) of every batch overlapping [start, end), in offset order.

        The first batch may begin before ``start`` and the last may end after
        ``end``: batches are never split, the caller skips the records it does not
        want.
        """

    @abstractmethod
    def end_offset(self, relation_id: int, partition: int) -> int:
        """Next offset to be assigned as of this snapshot (0 if the partition is empty)."""

    @abstractmethod
    def get(self, store: str, key: bytes) -> bytes | None:
        """Value of ``key`` in ``store``, or None."""

    def get_many(self, store: str, keys: list[bytes]) -> list[bytes | None]:
        """Values of ``keys`` in ``store`` (None where absent), in the order of ``keys``."""
        return [self.get(store, key) for key in keys]

    def weight_sum(self, relation_id: int, partition: int) -> tuple[int, int] | None:
        """(end, total): the weights of the partition's records [0, end) add up to ``total``, as
        kept from the appends' ``weights``; None when the storage keeps no such sum for it. A
        reader counts on from ``end`` (appends without weights may have followed)."""
        return None

    @abstractmethod
    def scan(self, store: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every key of ``store`` starting with ``prefix``, in key order.

        Keys are returned without the store prefix.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the view. Idempotent; reads after close raise."""

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Storage(ABC):
    """Durable, atomic, group-committed storage for logs and key/value stores."""

    @abstractmethod
    def commit(self, commit: Commit) -> CommitResult:
        """Apply ``commit`` atomically; return once it is durable (fsync'd). Thread-safe.

        Raises streamdb.errors.DiskFull when the disk is full, InternalError on other
        I/O errors (nothing is then assigned), ObjectNotInPrerequisiteState once closed.
        """

    @abstractmethod
    async def commit_async(self, commit: Commit) -> CommitResult:
        """Same as ``commit`` without blocking the event loop."""

    # Whether submit_in_order is there: commits written in the order they are queued.
    writes_in_order = False

    def submit_in_order(self, commit: Commit) -> Future[CommitResult]:
        """Queue ``commit`` behind every commit queued before it and return its completion (where
        ``writes_in_order``). A failed write fails every commit queued after it too, so a commit
        computed over an earlier one's rows is never written without it."""
        raise NotImplementedError

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """A consistent read view of every commit acknowledged so far."""

    def committed_end_offset(self, relation_id: int, partition: int) -> int | None:
        """The partition's end offset as of the last durable commit, where the backend knows it
        without a snapshot (None: take a snapshot to know)."""
        return None

    @abstractmethod
    def last_sequence(self) -> int:
        """Sequence number of the last durable commit (0 if none)."""

    @abstractmethod
    def close(self) -> None:
        """Finish queued commits, stop background work, release files. Idempotent."""

    def __enter__(self) -> Storage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class LogReader(ABC):
    """Reads the change logs from another process than the server's (a Spark task), never writes.

    ``snapshot()`` sees every commit the server had made when it was called. The spec a reader
    is opened from (``LogReaderSpec``) is plain data, so it travels to executors.
    """

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """A consistent read view, caught up with the server's latest commit."""

    @abstractmethod
    def close(self) -> None:
        """Release files and connections. Idempotent."""


@dataclass(frozen=True)
class LogReaderSpec:
    """Where the log is: the backend kind, the storage directory and, for Kafka, the brokers."""

    kind: str
    path: str
    kafka_bootstrap: str | None = None
