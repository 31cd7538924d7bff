"""Spark's checkpoint rewound to the last batch the server committed (a large batch's commit runs
beside Spark's next batch, docs/views.md): what goes and what stays. The end-to-end case, a
kill -9 in that window, is tests/test_e2e_durability.py."""

from __future__ import annotations

from pathlib import Path

from streamdb.runtime.spark.pipeline import last_spark_commit, rewind_checkpoint


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(path.name)


def _names(directory: Path) -> set[str]:
    return {f.name for f in directory.iterdir()}


def _checkpoint(root: Path) -> Path:
    """Spark's layout after batches 0-3 were recorded done and batch 4 planned and run: two
    operators, the first with a join's stores below a partition, metadata written at batches
    0 and 3 (the query restarted there)."""
    cp = root / "depth-1"
    for b in range(4):
        _touch(cp / "commits" / str(b))
        _touch(cp / "commits" / f".{b}.crc")
    for b in range(5):
        _touch(cp / "offsets" / str(b))
        _touch(cp / "offsets" / f".{b}.crc")
    _touch(cp / "metadata")
    for op in ("0", "1"):
        for part in ("0", "1"):
            store = cp / "state" / op / part
            for v in range(1, 6):  # batch b writes version b + 1
                _touch(store / f"{v}.changelog")
                _touch(store / f".{v}.changelog.crc")
            _touch(store / "1.zip")
            _touch(store / "5.zip")
            _touch(store / "SSTs" / "000008-f7b5.sst")
        for b in (0, 3):
            _touch(cp / "state" / op / "_metadata" / "v2" / str(b))
            _touch(cp / "state" / op / "_stateSchema" / "default" / f"{b}_ca235bb7-79c7-47fc")
    _touch(cp / "state" / "0" / "0" / "left-keyToNumValues" / "4.delta")
    _touch(cp / "state" / "0" / "0" / "left-keyToNumValues" / "2.delta")
    return cp


def test_the_commit_log_ends_at_the_committed_batch_and_the_next_runs_again(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path)
    assert last_spark_commit(cp) == 3

    assert rewind_checkpoint(cp, 1) == 2  # batches 2 and 3 were recorded, not committed
    assert last_spark_commit(cp) == 1
    assert _names(cp / "commits") == {"0", "1", ".0.crc", ".1.crc"}
    # Batch 2 runs again from its logged offsets; batch 3 and later are planned afresh.
    assert _names(cp / "offsets") == {"0", "1", "2", ".0.crc", ".1.crc", ".2.crc"}
    store = cp / "state" / "1" / "1"
    # Batch 2 starts from version 2 (after batch 1) and writes version 3 again.
    assert _names(store) == {"1.changelog", "2.changelog", ".1.changelog.crc", ".2.changelog.crc", "1.zip", "SSTs"}
    assert _names(store / "SSTs") == {"000008-f7b5.sst"}  # referenced by the zips Spark keeps track of
    assert _names(cp / "state" / "0" / "0" / "left-keyToNumValues") == {"2.delta"}
    assert _names(cp / "state" / "0" / "_metadata" / "v2") == {"0"}
    assert _names(cp / "state" / "0" / "_stateSchema" / "default") == {"0_ca235bb7-79c7-47fc"}
    assert (cp / "metadata").exists()


def test_a_batch_run_but_not_recorded_keeps_its_offsets(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path)
    logs = (_names(cp / "commits"), _names(cp / "offsets"))
    assert rewind_checkpoint(cp, 3) == 0  # batch 4 was planned and ran, but never recorded done
    assert (_names(cp / "commits"), _names(cp / "offsets")) == logs
    # Spark runs batch 4 again from its offsets, over version 4, and writes version 5 again.
    assert "5.changelog" not in _names(cp / "state" / "0" / "1")
    assert "4.changelog" in _names(cp / "state" / "0" / "1")
    assert _names(cp / "state" / "1" / "_metadata" / "v2") == {"0", "3"}


def test_a_rewind_cut_short_is_finished_by_the_next(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path)
    for b in (3, 2):  # the commit log went first, then the process died
        (cp / "commits" / str(b)).unlink()
    assert rewind_checkpoint(cp, 1) == 0
    assert _names(cp / "offsets") == {"0", "1", "2", ".0.crc", ".1.crc", ".2.crc"}
    assert "3.changelog" not in _names(cp / "state" / "0" / "1")


def test_an_empty_checkpoint(tmp_path: Path) -> None:
    assert last_spark_commit(tmp_path / "none") == -1
    assert rewind_checkpoint(tmp_path / "none", -1) == 0
