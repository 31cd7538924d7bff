"""The Spark JVM starts from a class data sharing archive when `make install` wrote one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from streamdb.runtime.spark import cds


def test_the_archive_is_named_for_this_jdk_and_spark_and_used_only_when_present(monkeypatch, tmp_path) -> None:
    name = cds.archive_name()
    assert name is not None and name.startswith("spark-cds-") and name.endswith(".jsa")
    monkeypatch.setattr("streamdb.runtime.spark.jvm._build_dirs", lambda: [tmp_path])
    assert cds.archive_path() is None and cds.java_options() == []
    (tmp_path / name).write_bytes(b"")
    assert cds.java_options()[0] == f"-XX:SharedArchiveFile={tmp_path / name}"
    import pyspark

    monkeypatch.setattr(pyspark, "__version__", pyspark.__version__ + ".other")
    assert cds.archive_name() != name and cds.java_options() == []  # another Spark finds none


def test_a_jvm_given_a_broken_archive_starts_anyway(tmp_path: Path) -> None:
    """A stale or damaged archive must never keep Spark from starting: the JVM maps none."""
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(b"not an archive")
    java = cds._java()
    if java is None:
        pytest.fail("no java: make install provides one")
    done = subprocess.run([str(java), f"-XX:SharedArchiveFile={broken}", *cds.QUIET.split(), "-version"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "warning" not in (done.stdout + done.stderr).lower()
