"""The source's offsets decide which backfill a view gets: a view rebuilt under its id (a new
generation, new operators) must get its whole history again, also from a batch Spark replays."""

from streamdb.runtime.spark.log_source import _same_generation, backfill_done

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
