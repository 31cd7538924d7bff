"""Unit tests of the watermark filter (runtime/watermarks.py): which events are on time."""

from __future__ import annotations

import datetime as dt

from streamdb.runtime.watermarks import WatermarkState


def _at(seconds: int) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)


def test_each_event_is_judged_against_the_watermark_the_events_before_it_left():
    state = WatermarkState()
    on_time, state = state.admitted([_at(s) for s in (10, 20, 12, 15, 30, 24)], 5.0)
    # After 20 the watermark is 15: 12 is late, 15 is not (equal is on time); after 30 it is 25.
    assert on_time == [0, 1, 3, 4]
    assert state.late_events == 2 and state.max_event_time == _at(30)
    assert state.watermark(5.0) == _at(25)
    again, after = state.admitted([_at(26), _at(1)], 5.0)
    assert again == [0] and after.late_events == 3 and after.max_event_time == _at(30)
    assert WatermarkState.from_json(after.to_json()) == after


def test_an_event_without_an_event_time_is_kept_and_moves_nothing():
    on_time, state = WatermarkState().admitted([_at(20), None, _at(1), None], 5.0)
    assert on_time == [0, 1, 3] and state.max_event_time == _at(20) and state.late_events == 1
