"""assign_pipelines: which views of a depth share a streaming pipeline."""

from streamdb.runtime.pipelines import assign_pipelines


def test_views_over_other_inputs_get_pipelines_of_their_own() -> None:
    assert assign_pipelines({10: (1, [3]), 11: (1, [3]), 12: (1, [4]), 13: (0, [3])}, {}) == {
        10: "depth-1-r3", 11: "depth-1-r3", 12: "depth-1-r4", 13: "depth-0-r3"}


def test_a_view_joins_a_pipeline_that_reads_one_of_its_inputs() -> None:
    # 21 reads 7 (20's) and 9 (22's): it joins 20's pipeline; 22 keeps its own.
    stored = {20: "depth-2-r5", 22: "depth-2-r9"}
    views = {20: (2, [5, 7]), 21: (2, [7, 9]), 22: (2, [9]), 23: (2, [8])}
    assert assign_pipelines(views, stored) == {20: "depth-2-r5", 21: "depth-2-r5", 22: "depth-2-r9",
                                               23: "depth-2-r8"}


def test_views_never_move_when_others_come_and_go() -> None:
    # The view that joined 30's and 31's inputs is gone: both stay where they run.
    stored = {30: "depth-1-r6", 31: "depth-1-r6", 33: "depth-1-r8"}
    assert assign_pipelines({30: (1, [6]), 31: (1, [8]), 33: (1, [8])}, stored) == stored


def test_a_view_of_another_depth_than_its_stored_pipeline_is_placed_again() -> None:
    assert assign_pipelines({40: (2, [6])}, {40: "depth-1-r6"}) == {40: "depth-2-r6"}
    assert assign_pipelines({41: (1, [6])}, {41: "1"}) == {41: "depth-1-r6"}  # a name of before


def test_a_view_without_inputs() -> None:
    assert assign_pipelines({50: (0, [])}, {}) == {50: "depth-0-r0"}
