"""The source's offsets decide which backfill a view gets: a view rebuilt under its id (a new
generation, new operators) must get its whole history again, also from a batch Spark replays."""

from pyspark.sql.streaming.datasource import ReadMaxRows

from streamdb.runtime.spark.log_source import LogStreamReader, _same_generation, backfill_done

JOINS = {"7": [5, 3]}


def test_progress_carries_over_only_within_a_generation():
    start = {"views": {"1": JOINS}, "gens": {"1": 40}, "bf": {"1": {"7": [5, 3]}}}
    assert _same_generation(start, {"1": JOINS}, {"1": 40}, "1")
    assert not _same_generation(start, {"1": JOINS}, {"1": 41}, "1")  # rebuilt, no new input
    assert not _same_generation(start, {"1": {"7": [9, 3]}}, {"1": 41}, "1")  # rebuilt later
    assert not _same_generation(start, {"2": JOINS}, {"2": 40}, "2")  # a new view
    older = {"views": {"1": JOINS}, "bf": {"1": {"7": [5, 3]}}}  # written before generations
    assert _same_generation(older, {"1": JOINS}, {"1": 40}, "1")


def test_a_replayed_batch_of_another_generation_does_not_finish_the_backfill():
    offsets = {"views": {"1": JOINS}, "gens": {"1": 40}, "bf": {"1": {"7": [5, 3]}}}
    assert backfill_done(offsets, 1, {7: (5, 3)}, 40)
    assert not backfill_done(offsets, 1, {7: (5, 3)}, 41)
    assert not backfill_done(offsets, 1, {7: (9, 3)}, 41)
    partial = {"views": {"1": JOINS}, "gens": {"1": 40}, "bf": {"1": {"7": [5, 1]}}}
    assert not backfill_done(partial, 1, {7: (5, 3)}, 40)


class _Ends:
    """A log whose partitions end where `ends` says (the source reads only their ends here)."""

    def __init__(self, ends: dict[int, list[int]]) -> None:
        self.ends = ends

    def snapshot(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def end_offset(self, rel: int, partition: int) -> int:
        return self.ends[rel][partition]


def _source(ends: dict[int, list[int]], hold: dict[str, list[int]] | None, max_rows: int) -> LogStreamReader:
    plan = {"relations": {"7": {"partitions": 2}}, "views": {"1": {"7": [0, 0]}}, "gens": {"1": 40},
            "max_rows": max_rows}
    if hold is not None:
        plan["hold"] = hold
    source = LogStreamReader(plan)
    source._reader = lambda: _Ends(ends)  # type: ignore[method-assign]
    return source


def test_a_push_querys_hold_ends_a_batch_at_its_start():
    """A push query's view pipeline runs no batch past the inputs' offsets as of its start, however
    many batches its backlog takes, so one batch ends exactly there; then it goes on."""
    limit = ReadMaxRows(120)
    source = _source({7: [300, 60]}, {"7": [100, 50]}, 120)
    first = source.latestOffset(source.initialOffset(), limit)
    assert first["rels"] == {"7": [100, 20]}  # the budget, partition 0 first, no further than the hold
    second = source.latestOffset(first, limit)
    assert second["rels"] == {"7": [100, 50]}  # exactly the hold: partition 0 waits for partition 1
    third = source.latestOffset(second, limit)
    assert third["rels"] == {"7": [220, 50]}  # past it, as without a hold
    assert source.latestOffset(third, limit)["rels"] == {"7": [300, 60]}
    # The first batch stops at the hold even when it is where the logs start: the view's result
    # as of an empty input (a global aggregate's row) is its own batch.
    empty = _source({7: [300, 60]}, {"7": [0, 0]}, 1000)
    assert empty.latestOffset(empty.initialOffset(), ReadMaxRows(1000))["rels"] == {"7": [0, 0]}
    assert _source({7: [300, 60]}, None, 1000).latestOffset({}, ReadMaxRows(1000))["rels"] == {"7": [300, 60]}
