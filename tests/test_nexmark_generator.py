"""The Nexmark generator (bench/nexmark/generator.py): proportions, id rules, event times,
determinism and the file format. Pure Python, no server."""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("streamdb_bench_nexmark_generator",
                                               ROOT / "bench" / "nexmark" / "generator.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)


def parse_ms(text: str) -> int:
    assert text.endswith("Z") and len(text) == len("2024-01-01T00:00:00.000Z"), text
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.fixture(scope="module")
def events() -> list[tuple[str, dict]]:
    return list(gen.generate(5000, rate=1000, seed=1))


def test_proportions_1_3_46(events: list[tuple[str, dict]]) -> None:
    counts = Counter(kind for kind, _ in events[:1000])
    assert counts == {"person": 20, "auction": 60, "bid": 920}
    # the reference's order within each block of 50: one person, three auctions, 46 bids
    assert [k for k, _ in events[:50]] == ["person"] + ["auction"] * 3 + ["bid"] * 46
    assert [gen.kind_of(i) for i in range(5000)] == [k for k, _ in events]


def test_fields_and_types(events: list[tuple[str, dict]]) -> None:
    for kind, row in events:
        assert tuple(row) == gen.FIELDS[kind]
        parse_ms(row["date_time"])
        assert isinstance(row["extra"], str)
        if kind == "auction":
            parse_ms(row["expires"])
            assert 10 <= row["category"] <= 14
            assert row["reserve"] > row["initial_bid"] >= 100
        elif kind == "bid":
            assert 100 <= row["price"] <= 100_000_000
            assert row["url"].startswith("https://www.nexmark.com/")
        else:
            assert row["state"] in gen.US_STATES and row["city"] in gen.US_CITIES


def test_ids_follow_the_nexmark_rules(events: list[tuple[str, dict]]) -> None:
    last_person, last_auction = gen.FIRST_PERSON_ID - 1, gen.FIRST_AUCTION_ID - 1
    hot_bids = hot_bidders = hot_sellers = 0
    for kind, row in events:
        if kind == "person":
            assert row["id"] == last_person + 1  # dense and increasing
            last_person = row["id"]
        elif kind == "auction":
            assert row["id"] == last_auction + 1
            last_auction = row["id"]
            # a seller exists already, or is at most PERSON_ID_LEAD persons ahead
            assert gen.FIRST_PERSON_ID <= row["seller"] <= last_person + gen.PERSON_ID_LEAD
            assert row["seller"] >= last_person - gen.NUM_ACTIVE_PEOPLE + 1
            hot_sellers += (row["seller"] - gen.FIRST_PERSON_ID) % 100 == 0
            assert row["date_time"] < row["expires"]
        else:
            # a bid's auction is at most AUCTION_ID_LEAD ahead and at most 100 (in flight) behind
            assert last_auction - gen.NUM_IN_FLIGHT_AUCTIONS <= row["auction"] <= last_auction + gen.AUCTION_ID_LEAD
            assert gen.FIRST_PERSON_ID <= row["bidder"] <= last_person + gen.PERSON_ID_LEAD
            hot_bids += (row["auction"] - gen.FIRST_AUCTION_ID) % 100 == 0
            hot_bidders += (row["bidder"] - gen.FIRST_PERSON_ID) % 100 == 1
    bids = sum(k == "bid" for k, _ in events)
    auctions = sum(k == "auction" for k, _ in events)
    assert 0.45 < hot_bids / bids < 0.6  # 1/2 hot, plus a few random picks of the hot one
    assert 0.7 < hot_bidders / bids < 0.8  # 3/4
    assert 0.65 < hot_sellers / auctions < 0.85  # 3/4


def test_event_times_advance_with_the_rate() -> None:
    for rate in (1000, 10_000, 3):
        rows = [r for _, r in gen.generate(600, rate=rate, seed=3)]
        times = [parse_ms(r["date_time"]) for r in rows]
        assert times[0] == gen.BASE_TIME_MS  # 2024-01-01T00:00:00Z
        assert rows[0]["date_time"] == "2024-01-01T00:00:00.000Z"
        assert all(a <= b for a, b in itertools.pairwise(times))
        assert times == [gen.BASE_TIME_MS + i * 1000 // rate for i in range(600)]


def test_deterministic_for_a_seed() -> None:
    a = list(gen.generate(2000, rate=10_000, seed=7))
    b = list(gen.generate(2000, rate=10_000, seed=7))
    c = list(gen.generate(2000, rate=10_000, seed=8))
    assert a == b
    assert a != c
    # the structure (kinds, ids, times) does not depend on the seed, the values do
    assert [(k, r.get("id"), r["date_time"]) for k, r in a] == [(k, r.get("id"), r["date_time"]) for k, r in c]


def test_extra_pads_to_the_reference_sizes(events: list[tuple[str, dict]]) -> None:
    """`extra` brings each event to the reference's idealized size (its own formula: 8 bytes per
    number, string lengths; a bid's channel and url are not counted) +-20%."""
    def size(kind: str, r: dict) -> int:
        if kind == "person":
            return 8 + sum(len(r[k]) for k in ("name", "email_address", "credit_card", "city", "state", "extra"))
        if kind == "auction":
            return 8 + len(r["item_name"]) + len(r["description"]) + 40 + len(r["extra"])
        return 32 + len(r["extra"])

    for kind, target in (("person", 200), ("auction", 500), ("bid", 100)):
        sizes = [size(k, r) for k, r in events if k == kind]
        assert all(0.8 * target - 1 <= s <= 1.2 * target + 1 for s in sizes), kind
        assert 0.95 * target < sum(sizes) / len(sizes) < 1.05 * target, kind


def test_files_match_generate(tmp_path: Path) -> None:
    meta = gen.write(3000, tmp_path, rate=500, seed=5)
    assert meta == json.loads((tmp_path / "meta.json").read_text())
    assert meta == {"events": 3000, "persons": 60, "auctions": 180, "bids": 2760, "rate": 500,
                    "first_time": "2024-01-01T00:00:00.000Z", "last_time": "2024-01-01T00:00:05.998Z", "seed": 5}
    expected: dict[str, list[dict]] = {"person": [], "auction": [], "bid": []}
    for kind, row in gen.generate(3000, rate=500, seed=5):
        expected[kind].append(row)
    for kind in gen.KINDS:
        lines = (tmp_path / f"{kind}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == expected[kind]


def test_cli(tmp_path: Path) -> None:
    gen.main(["--events", "100", "--out", str(tmp_path / "d"), "--rate", "10", "--seed", "2"])
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    assert (meta["persons"], meta["auctions"], meta["bids"]) == (2, 6, 92)
    assert meta["last_time"] == "2024-01-01T00:00:09.900Z"


def test_ddl_and_query_files_match_the_generator() -> None:
    """bench/nexmark/queries: ddl.sql declares exactly the generator's fields, and every query
    file creates the view nexmark_qN (or says why it is unsupported)."""
    queries = ROOT / "bench" / "nexmark" / "queries"
    ddl = (queries / "ddl.sql").read_text()
    for kind, fields in gen.FIELDS.items():
        body = re.search(rf"CREATE STREAM {kind} \((.*?)\);", ddl, re.S)
        assert body is not None, kind
        assert tuple(line.split()[0] for line in body.group(1).strip().splitlines()) == fields
    for q in ("q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q12", "q14", "q17", "q22"):
        text = (queries / f"{q}.sql").read_text()
        assert f"CREATE MATERIALIZED VIEW nexmark_{q} AS" in text or text.startswith("-- unsupported:"), q
