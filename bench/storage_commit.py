"""Micro-benchmark: synced commits/s for 1 vs N concurrent writers of single-record batches.

Shows group commit at work: with one writer every commit pays one fsync; with many
writers the single writer thread merges everything queued into one synced WriteBatch.

    .venv/bin/python bench/storage_commit.py [--seconds 3] [--writers 1,16] [--path DIR]

Prints figures only; timings depend on the disk.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from streamdb.storage import Append, Commit
from streamdb.storage.rocksdb import RocksDBStorage


def run(path: str, writers: int, seconds: float, payload: bytes) -> tuple[float, float, float]:
    """(commits/s, mean commits per group, mean latency ms) for `writers` threads."""
    storage = RocksDBStorage(path)
    stop = threading.Event()
    counts = [0] * writers
    latency = [0.0] * writers
    barrier = threading.Barrier(writers + 1)

    def writer(w: int) -> None:
        barrier.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            storage.commit(Commit(appends=[Append(1, w, payload, 1)]))
            latency[w] += time.perf_counter() - t0
            counts[w] += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    g0, c0 = storage.groups_written, storage.commits_written
    barrier.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    groups, commits = storage.groups_written - g0, storage.commits_written - c0
    storage.close()
    total = sum(counts)
    return total / elapsed, commits / max(groups, 1), 1000 * sum(latency) / max(total, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--writers", default="1,16", help="comma-separated writer counts")
    parser.add_argument("--payload", type=int, default=100, help="payload bytes per single-record batch")
    parser.add_argument("--path", default=None, help="directory for the databases (default: a temp dir)")
    args = parser.parse_args()
    payload = b"x" * args.payload
    with tempfile.TemporaryDirectory(dir=args.path) as tmp:
        print(f"synced single-record commits, {args.payload}-byte payload, {args.seconds:g}s each, dir {tmp}")
        for n in (int(x) for x in args.writers.split(",")):
            rate, per_group, lat = run(f"{tmp}/w{n}", n, args.seconds, payload)
            print(
                f"{n:>3} writer(s): {rate:>9,.0f} commits/s   {per_group:6.1f} commits/fsync   "
                f"{lat:6.2f} ms mean latency"
            )


if __name__ == "__main__":
    main()
