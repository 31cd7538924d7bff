"""The Spark JVMs' JIT options: each per-row CompileCommand is one HotSpot parses, and none is echoed.

HotSpot does not refuse a CompileCommand it cannot parse: it prints the error on stdout and starts
without it, so a mistyped pattern would silently leave the per-row code at the planner's thresholds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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
