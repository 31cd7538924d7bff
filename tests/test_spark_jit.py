"""The Spark JVMs' JIT options: each per-row CompileCommand is one HotSpot parses, and none is echoed.

HotSpot does not refuse a CompileCommand it cannot parse: it prints the error on stdout and starts
without it, so a mistyped pattern would silently leave the per-row code at the planner's thresholds.
Also the size of Spark's cache of generated classes, which decides how often the JVM compiles.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import TEST_JVM_OPTIONS

from streamdb.runtime.spark import cds, session
from streamdb.runtime.spark.session import SparkRuntime


def _java_version(options: list[str]) -> subprocess.CompletedProcess[str]:
    java = cds._java()
    if java is None:
        pytest.fail("no java: make install provides one")
    return subprocess.run([str(java), *options, "-version"], capture_output=True, text=True, timeout=60)


def test_every_row_code_pattern_parses_and_the_jvm_echoes_none(tmp_path: Path) -> None:
    commands = session.ROW_CODE_COMPILE_COMMANDS.split()
    assert commands[0] == "-XX:CompileCommand=quiet"  # before the others, or they are echoed
    loud = _java_version(commands[1:])
    assert loud.returncode == 0, loud.stderr
    assert "error" not in loud.stdout.lower(), loud.stdout
    echoed = [line for line in loud.stdout.splitlines() if line.startswith("CompileCommand: CompileThresholdScaling")]
    assert [line.split()[2] for line in echoed] == [f"{pattern}.*" for pattern in session.ROW_CODE]
    assert all(line.endswith("= 0.033300") for line in echoed), echoed

    conf = SparkRuntime("local[2]", work_dir=str(tmp_path)).spark_conf()
    for role in ("driver", "executor"):
        assert session.JIT_OPTIONS in conf[f"spark.{role}.extraJavaOptions"]
    quiet = _java_version(session.JIT_OPTIONS.split())
    assert quiet.returncode == 0, quiet.stderr
    assert "CompileCommand" not in quiet.stdout + quiet.stderr


def test_spark_jvm_options_come_after_streamdbs_own_in_both_roles(tmp_path: Path) -> None:
    """Settings.spark_jvm_options: appended, so that HotSpot's last-one-wins lets them override
    the JIT thresholds (the tests' servers run C1 only this way: conftest.TEST_JVM_OPTIONS)."""
    extra = "-XX:TieredStopAtLevel=1 -Dstreamdb.test=1"
    conf = SparkRuntime("local[2]", work_dir=str(tmp_path), jvm_options=f"  {extra} ").spark_conf()
    for role in ("driver", "executor"):
        opts = conf[f"spark.{role}.extraJavaOptions"]
        assert opts.endswith(f"{session.JIT_OPTIONS} {extra}"), opts
    plain = SparkRuntime("local[2]", work_dir=str(tmp_path)).spark_conf()
    assert plain["spark.executor.extraJavaOptions"] == session.JIT_OPTIONS
    assert plain["spark.driver.extraJavaOptions"].endswith(session.JIT_OPTIONS)


def _spark_jvm_args(server) -> list[str]:
    """The command line of the Spark JVM the server launched (started by a first query)."""
    with server.connect() as conn:
        assert conn.execute("SELECT count(*) FROM generate_series(1, 3)").fetchone() == (3,)
    pid_file = server.data_dir / "spark" / "jvm.pid"
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes().decode().split("\0")


def test_the_servers_spark_jvm_runs_with_the_configured_options(server) -> None:
    """End to end: STREAMDB_SPARK_JVM_OPTIONS (the suite's TEST_JVM_OPTIONS) reaches the JVM the
    server launches, after the JIT thresholds it overrides."""
    args = _spark_jvm_args(server)
    assert TEST_JVM_OPTIONS in args
    assert args.index(TEST_JVM_OPTIONS) > args.index(session.JIT_THRESHOLDS.split()[-1])


def test_the_servers_spark_keeps_1000_generated_classes(server) -> None:
    """Spark's cache of generated classes is a static setting, fixed when the JVM starts: the
    server's JVM gets StreamDB's size, not Spark's 100 (with a few dozen views every batch compiled
    its code again; session.CODEGEN_CACHE_ENTRIES)."""
    assert f"spark.sql.codegen.cache.maxEntries={session.CODEGEN_CACHE_ENTRIES}" in _spark_jvm_args(server)
    assert session.CODEGEN_CACHE_ENTRIES == 1000
