"""How a micro-batch's log partitions become Spark tasks (streamdb.spark.LogGroup): small ones
share a task, so a batch of a few changes over several relations deserializes the stage's plan
once, not once per relation; a backfill's full chunks keep a task each."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamdb.runtime.spark.jvm import _javac, jar_path, pyspark_jars
from tests.test_operators import _java

SOURCE = Path(__file__).resolve().parent / "java" / "LogGroupCheck.java"
TASK_ROWS = 16_384
CHUNK = 125_000


@pytest.fixture(scope="module")
def classpath() -> Iterator[str]:
    jars = f"{jar_path()}{os.pathsep}{pyspark_jars()}/*"
    with tempfile.TemporaryDirectory(prefix="streamdb-loggroup-") as classes:
        out = subprocess.run([_javac(), "-nowarn", "-cp", jars, "-d", classes, str(SOURCE)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        yield f"{classes}{os.pathsep}{jars}"


def tasks(classpath: str, parts: list[tuple[int, int, int, int]]) -> list[tuple[str, list[tuple[int, ...]]]]:
    args = [":".join(map(str, p)) for p in parts]
    out = subprocess.run([_java(), "-cp", classpath, "streamdb.spark.LogGroupCheck", *args],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    result = []
    for line in out.splitlines():
        kind, *members = line.split()
        result.append((kind, [tuple(int(x) for x in m.split(":")) for m in members]))
    return result


def test_small_partitions_share_one_task_in_log_order(classpath):
    # Four streams with a few changes each, and a second chunk of relation 3 given first.
    parts = [(7, 0, 40, 45), (3, 0, 10, 20), (5, 1, 0, 1), (3, 0, 0, 10), (4, 0, 100, 300)]
    assert tasks(classpath, parts) == [("group", sorted(parts))]


def test_more_rows_take_more_tasks_balanced_by_rows(classpath):
    parts = [(r, 0, 0, 10_000) for r in range(1, 6)]  # 50,000 rows: four tasks of TASK_ROWS
    got = tasks(classpath, parts)
    assert len(got) == -(-50_000 // TASK_ROWS) == 4
    assert sorted(p for _, members in got for p in members) == parts  # each partition once
    loads = sorted(sum(end - start for _, _, start, end in members) for _, members in got)
    assert loads == [10_000, 10_000, 10_000, 20_000]


def test_full_chunks_keep_a_task_each(classpath):
    # A backfill: one relation's two full chunks and a small remainder of another.
    parts = [(2, 0, 0, CHUNK), (2, 0, CHUNK, 2 * CHUNK), (9, 0, 0, 5)]
    got = tasks(classpath, parts)
    assert len(got) == 3
    assert [kind for kind, _ in got] == ["single"] * 3
    assert sorted(m for _, members in got for m in members) == sorted(parts)
