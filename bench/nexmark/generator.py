"""A deterministic Nexmark event generator with the reference semantics.

The model is the one of the Nexmark reference generator (Apache Beam's `nexmark` module, copied
by nexmark-flink and RisingWave): events are numbered 0, 1, 2, ...; event n is a person, an auction
or a bid by `n % 50` (proportions 1 : 3 : 46, so event 0 is a person), and

- a person's id is 1000 + the number of persons before it; an auction's id is 1000 + the number
  of auctions before it (ids are dense and increase with event order);
- an auction's seller is, with probability 3/4, a *hot seller* (the first person of the current
  batch of 100 persons), otherwise one of the last 1,000 active persons or up to 10 persons ahead
  (PERSON_ID_LEAD: a seller may not exist yet); category 10..14; initial bid and reserve from
  the reference price distribution (round(10 ** U(0, 6) * 100) cents); it expires after a random
  length averaging the event time 100 auctions ahead (so about 100 auctions are in flight);
- a bid's auction is, with probability 1/2, a *hot auction* (the first of the current batch of 100
  auctions), otherwise one of the last 100 auctions or up to 10 ahead (AUCTION_ID_LEAD); its bidder
  is, with probability 3/4, a *hot bidder* (the second person of the current batch of 100),
  otherwise like a seller; channel and url: one of 4 hot channels with probability 1/2, else one
  of 10,000 channels `channel-<n>` with a fixed url each;
- every event carries `extra`, padding that brings it to the reference average size (person 200,
  auction 500, bid 100 bytes, +-20%).

Event time: event n happens at BASE_TIME + floor(n * 1000 / rate) ms, BASE_TIME being
2024-01-01T00:00:00Z, so the rate is events per second of event time and runs are reproducible.
Random values come from one `random.Random(seed)` drawn in event order (the reference seeds a
java.util.Random per event; the values differ, the distributions do not). Strings are slices of
pools of random letters drawn once per seed, which is what makes this fast in pure Python.

    python bench/nexmark/generator.py --events N --out DIR [--rate 10000] [--seed 1]

writes DIR/person.jsonl, DIR/auction.jsonl, DIR/bid.jsonl (one JSON object per line, fields as
in PERSON_FIELDS, AUCTION_FIELDS, BID_FIELDS; date_time and expires as ISO-8601 UTC with
milliseconds, e.g. "2024-01-01T00:00:00.100Z") and DIR/meta.json {events, persons, auctions,
bids, rate, first_time, last_time, seed}. `generate(n, rate, seed)` yields the same events as
(kind, dict) pairs in event order.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PERSON_FIELDS = ("id", "name", "email_address", "credit_card", "city", "state", "date_time", "extra")
AUCTION_FIELDS = ("id", "item_name", "description", "initial_bid", "reserve", "date_time", "expires", "seller",
                  "category", "extra")
BID_FIELDS = ("auction", "bidder", "price", "channel", "url", "date_time", "extra")
FIELDS = {"person": PERSON_FIELDS, "auction": AUCTION_FIELDS, "bid": BID_FIELDS}
KINDS = ("person", "auction", "bid")

BASE_TIME_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
# "batch" sizes: a hot seller/auction/bidder is the first (bidder: second) of the current batch
HOT_SELLER_BATCH = HOT_AUCTION_BATCH = HOT_BIDDER_BATCH = 100
# 1 - 1/ratio of auctions/bids go to hot sellers, auctions, bidders, channels
HOT_SELLERS_RATIO, HOT_AUCTION_RATIO, HOT_BIDDERS_RATIO, HOT_CHANNELS_RATIO = 4, 2, 4, 2
CHANNELS_NUMBER = 10_000
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100
MIN_STRING_LENGTH = 3

FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle",
             "Kent", "Cheyenne")
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_POOL_CHARS = 1 << 18


# ---- ids (the reference's GeneratorConfig arithmetic, base 0) -------------------------------------


def last_base0_person_id(event_id: int) -> int:
    """The (base 0) id of the last person generated at or before event `event_id`."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    if offset >= PERSON_PROPORTION:
        offset = PERSON_PROPORTION - 1
    return epoch * PERSON_PROPORTION + offset


def last_base0_auction_id(event_id: int) -> int:
    """The (base 0) id of the last auction generated at or before event `event_id` (-1: none yet)."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    if offset < PERSON_PROPORTION:  # a person: the last auction of the previous epoch
        epoch -= 1
        offset = AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:  # a bid: the last auction of this epoch
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


def kind_of(event_id: int) -> str:
    rem = event_id % TOTAL_PROPORTION
    if rem < PERSON_PROPORTION:
        return "person"
    if rem < PERSON_PROPORTION + AUCTION_PROPORTION:
        return "auction"
    return "bid"


def _java_reverse(n: int) -> int:
    """abs(Integer.reverse(n)) as in the reference's channel urls."""
    r = int(f"{n & 0xFFFFFFFF:032b}"[::-1], 2)
    return abs(r - (1 << 32) if r >= 1 << 31 else r)


def iso_ms(ms: int) -> str:
    """Epoch milliseconds -> '2024-01-01T00:00:00.000Z'."""
    s, frac = divmod(ms, 1000)
    return dt.datetime.fromtimestamp(s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:03d}Z"


def event_time_ms(n: int, rate: int) -> int:
    """Event time of event number n at `rate` events per second of event time."""
    return BASE_TIME_MS + (n * 1000) // rate


# ---- the generator --------------------------------------------------------------------------------


def _events(n: int, rate: int, seed: int) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """(kind index 0/1/2, field values in FIELDS order) for events 0 .. n-1."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    side = random.Random(f"nexmark-urls-{seed}")

    def slow_string(max_len: int, special: str) -> str:
        length = MIN_STRING_LENGTH + side.randrange(max_len - MIN_STRING_LENGTH)
        return "".join(special if side.randrange(13) == 0 else side.choice(_LETTERS) for _ in range(length)).strip()

    def base_url() -> str:
        return ("https://www.nexmark.com/" + slow_string(5, "_") + "/" + slow_string(5, "_") + "/"
                + slow_string(5, "_") + "/item.htm?query=1")

    hot_urls = tuple(base_url() for _ in HOT_CHANNELS)
    channels: dict[int, tuple[str, str]] = {}  # made on first use, like the reference's cache

    def channel_of(c: int) -> tuple[str, str]:
        found = channels.get(c)
        if found is None:
            url = base_url()
            if side.randrange(10) > 0:
                url += f"&channel_id={_java_reverse(c)}"
            found = channels[c] = (f"channel-{c}", url)
        return found

    # Pools: letters only (padding), letters with a space 1 in 13 (names, descriptions, emails).
    letters = "".join(side.choices(_LETTERS, k=_POOL_CHARS))
    spaced = "".join(side.choices(_LETTERS * 12 + " " * 26, k=_POOL_CHARS))
    rnd = rng.random

    def next_string(max_len: int) -> str:
        length = MIN_STRING_LENGTH + int(rnd() * (max_len - MIN_STRING_LENGTH))
        off = int(rnd() * (_POOL_CHARS - length))
        return spaced[off:off + length].strip()

    def next_extra(current: int, average: int) -> str:
        if current > average:
            return ""
        wanted = average - current
        delta = int(wanted * 0.2 + 0.5)
        size = wanted - delta + (int(rnd() * 2 * delta) if delta else 0)
        off = int(rnd() * (_POOL_CHARS - size))
        return letters[off:off + size]

    def next_price() -> int:
        return int(10.0 ** (rnd() * 6.0) * 100.0 + 0.5)

    def next_base0_person_id(event_id: int) -> int:
        num_people = last_base0_person_id(event_id) + 1
        active = min(num_people, NUM_ACTIVE_PEOPLE)
        return num_people - active + int(rnd() * (active + PERSON_ID_LEAD))

    def next_base0_auction_id(event_id: int) -> int:
        max_auction = last_base0_auction_id(event_id)
        min_auction = max(max_auction - NUM_IN_FLIGHT_AUCTIONS, 0)
        return min_auction + int(rnd() * (max_auction - min_auction + 1 + AUCTION_ID_LEAD))

    events_for_auctions = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
    cur_sec, prefix = -1, ""
    for e in range(n):
        ms = BASE_TIME_MS + (e * 1000) // rate
        sec, frac = divmod(ms, 1000)
        if sec != cur_sec:
            cur_sec = sec
            prefix = dt.datetime.fromtimestamp(sec, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        ts = f"{prefix}{frac:03d}Z"
        rem = e % TOTAL_PROPORTION
        if rem >= PERSON_PROPORTION + AUCTION_PROPORTION:  # bid
            if int(rnd() * HOT_AUCTION_RATIO) > 0:
                auction = (last_base0_auction_id(e) // HOT_AUCTION_BATCH) * HOT_AUCTION_BATCH
            else:
                auction = next_base0_auction_id(e)
            if int(rnd() * HOT_BIDDERS_RATIO) > 0:
                bidder = (last_base0_person_id(e) // HOT_BIDDER_BATCH) * HOT_BIDDER_BATCH + 1
            else:
                bidder = next_base0_person_id(e)
            price = next_price()
            if int(rnd() * HOT_CHANNELS_RATIO) > 0:
                i = int(rnd() * len(HOT_CHANNELS))
                channel, url = HOT_CHANNELS[i], hot_urls[i]
            else:
                channel, url = channel_of(int(rnd() * CHANNELS_NUMBER))
            yield 2, (auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID, price, channel, url, ts,
                      next_extra(32, AVG_BID_BYTES))
        elif rem < PERSON_PROPORTION:  # person
            pid = last_base0_person_id(e) + FIRST_PERSON_ID
            name = FIRST_NAMES[int(rnd() * len(FIRST_NAMES))] + " " + LAST_NAMES[int(rnd() * len(LAST_NAMES))]
            email = next_string(7) + "@" + next_string(5) + ".com"
            card = (f"{int(rnd() * 10000):04d} {int(rnd() * 10000):04d} "
                    f"{int(rnd() * 10000):04d} {int(rnd() * 10000):04d}")
            city = US_CITIES[int(rnd() * len(US_CITIES))]
            state = US_STATES[int(rnd() * len(US_STATES))]
            size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
            yield 0, (pid, name, email, card, city, state, ts, next_extra(size, AVG_PERSON_BYTES))
        else:  # auction
            aid = last_base0_auction_id(e) + FIRST_AUCTION_ID
            if int(rnd() * HOT_SELLERS_RATIO) > 0:
                seller = (last_base0_person_id(e) // HOT_SELLER_BATCH) * HOT_SELLER_BATCH
            else:
                seller = next_base0_person_id(e)
            category = FIRST_CATEGORY_ID + int(rnd() * NUM_CATEGORIES)
            initial_bid = next_price()
            # auction length: uniform in [1, 2 * horizon], horizon = event time 100 auctions ahead
            horizon = BASE_TIME_MS + ((e + events_for_auctions) * 1000) // rate - ms
            expires = iso_ms(ms + 1 + int(rnd() * max(horizon * 2, 1)))
            item_name = next_string(20)
            description = next_string(100)
            reserve = initial_bid + next_price()
            size = 8 + len(item_name) + len(description) + 40
            yield 1, (aid, item_name, description, initial_bid, reserve, ts, expires, seller + FIRST_PERSON_ID,
                      category, next_extra(size, AVG_AUCTION_BYTES))


def generate(n: int, rate: int = 10_000, seed: int = 1) -> Iterator[tuple[str, dict[str, Any]]]:
    """Events 0 .. n-1 in event order as (kind, row): kind 'person' | 'auction' | 'bid', row a dict
    with the fields of FIELDS[kind] (times as ISO-8601 strings, exactly as in the files)."""
    names = (PERSON_FIELDS, AUCTION_FIELDS, BID_FIELDS)
    for k, values in _events(n, rate, seed):
        yield KINDS[k], dict(zip(names[k], values, strict=True))


# Every string the generator makes is letters, digits, spaces and "@.:/_?=&-": no JSON escaping.
_TEMPLATES = (
    '{{"id":{},"name":"{}","email_address":"{}","credit_card":"{}","city":"{}","state":"{}",'
    '"date_time":"{}","extra":"{}"}}\n',
    '{{"id":{},"item_name":"{}","description":"{}","initial_bid":{},"reserve":{},"date_time":"{}",'
    '"expires":"{}","seller":{},"category":{},"extra":"{}"}}\n',
    '{{"auction":{},"bidder":{},"price":{},"channel":"{}","url":"{}","date_time":"{}","extra":"{}"}}\n',
)


def write(n: int, out: Path, rate: int = 10_000, seed: int = 1, progress: bool = False) -> dict[str, Any]:
    """Write the three JSON-lines files and meta.json under `out`; returns the meta."""
    out.mkdir(parents=True, exist_ok=True)
    files = [(out / f"{k}.jsonl").open("w", encoding="utf-8", buffering=1 << 20) for k in KINDS]
    buffers: list[list[str]] = [[], [], []]
    counts = [0, 0, 0]
    fmt = [t.format for t in _TEMPLATES]
    step = max(1, n // (20 if sys.stderr.isatty() else 5))
    started = time.monotonic()
    try:
        for e, (k, values) in enumerate(_events(n, rate, seed)):
            buffers[k].append(fmt[k](*values))
            counts[k] += 1
            if len(buffers[k]) >= 8192:
                files[k].write("".join(buffers[k]))
                buffers[k].clear()
            if progress and (e + 1) % step == 0:
                _bar(e + 1, n, started)
        for f, buf in zip(files, buffers, strict=True):
            f.write("".join(buf))
    finally:
        for f in files:
            f.close()
    meta = {"events": n, "persons": counts[0], "auctions": counts[1], "bids": counts[2], "rate": rate,
            "first_time": iso_ms(event_time_ms(0, rate)), "last_time": iso_ms(event_time_ms(max(n - 1, 0), rate)),
            "seed": seed}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _bar(done: int, total: int, started: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    elapsed = time.monotonic() - started
    tty = sys.stderr.isatty()
    lead = "\r" if tty else ""
    sys.stderr.write(f"{lead}[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} events "
                     f"{elapsed:5.1f} s ({done / max(elapsed, 1e-9):,.0f}/s)")
    if done >= total or not tty:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Generate Nexmark events (person, auction, bid) as JSON lines.")
    ap.add_argument("--events", type=int, required=True, help="number of events in total")
    ap.add_argument("--out", type=Path, required=True, help="directory for person/auction/bid.jsonl and meta.json")
    ap.add_argument("--rate", type=int, default=10_000, help="events per second of event time (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.events < 0 or args.rate <= 0:
        ap.error("--events must be >= 0 and --rate > 0")
    started = time.monotonic()
    meta = write(args.events, args.out, args.rate, args.seed, progress=True)
    print(f"{meta['events']:,} events ({meta['persons']:,} persons, {meta['auctions']:,} auctions, "
          f"{meta['bids']:,} bids) {meta['first_time']} .. {meta['last_time']} -> {args.out} "
          f"in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
