"""A PostgreSQL wire-protocol fuzzer for a running StreamDB (or PostgreSQL) server.

Each case opens its own raw socket and sends one hostile input: malformed lengths, unknown
message types, messages out of order, NUL bytes and invalid UTF-8 inside strings, SSLRequest
games, half-sent packets and stalls, and random byte mutations of valid sessions. Pass criteria:

- the server answers (any reply, usually an ErrorResponse) or closes the connection within
  `timeout` seconds, except for half-sent packets and stalls, where waiting is right: those are
  only held open for a while and then closed (a leaked session would soon exhaust
  max_connections and make later cases fail to connect);
- where the right answer is known (e.g. a NUL inside a query string: 08P01 or 22021, never the
  query's rows), the answer matches, and a connection that should stay usable answers SELECT 1;
- a healthy psycopg client running beside the fuzzer (SELECT 1 and INSERT + read-back every
  ~50 ms) sees no error.

    python -m tests.fuzz.wire_fuzz --cases 100000 --seed 1 --host 127.0.0.1 --port 5432

Every case is reproducible from (seed, index): `--only 1234` reruns case 1234 of a seed.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg

PROTOCOL_3_0 = 196608
SSL_REQUEST = struct.pack("!ii", 8, 80877103)
GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)
FRONTEND_TYPES = b"QPBDECSHFXdcf"


# --- message builders ------------------------------------------------------------------------

def msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def startup_packet(user: str, database: str, version: int = PROTOCOL_3_0) -> bytes:
    body = struct.pack("!i", version) + b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
    return struct.pack("!i", len(body) + 4) + body


def query(sql: bytes) -> bytes:
    return msg(b"Q", sql + b"\0")


def parse(name: bytes, sql: bytes, oids: tuple[int, ...] = ()) -> bytes:
    return msg(b"P", name + b"\0" + sql + b"\0" + struct.pack("!h", len(oids))
               + b"".join(struct.pack("!I", o) for o in oids))


def bind(portal: bytes, statement: bytes, params: tuple[bytes | None, ...] = ()) -> bytes:
    body = portal + b"\0" + statement + b"\0" + struct.pack("!h", 0) + struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    return msg(b"B", body + struct.pack("!h", 0))


def describe(target: bytes, name: bytes) -> bytes:
    return msg(b"D", target + name + b"\0")


def execute(portal: bytes, max_rows: int = 0) -> bytes:
    return msg(b"E", portal + b"\0" + struct.pack("!i", max_rows))


def close(target: bytes, name: bytes) -> bytes:
    return msg(b"C", target + name + b"\0")


SYNC = msg(b"S")
FLUSH = msg(b"H")
PROBE = query(b"SELECT 1")  # appended where the connection must stay usable


# --- cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One hostile input. `expect`:
    - "reply": some answer (usually ErrorResponse) or a close within the timeout;
    - "usable": the trailing PROBE must answer SELECT 1 (errors before it are fine);
    - "close": an ErrorResponse and/or a close, never rows;
    - "stall": the server may wait (half-sent input); hold `hold` seconds, then close."""

    family: str
    payload: bytes
    expect: str = "reply"
    do_startup: bool = True
    sqlstates: tuple[str, ...] = ()  # if set, the first ErrorResponse must carry one of these
    hold: float = 0.0


def _sql(rng: random.Random) -> bytes:
    return rng.choice([b"SELECT 1", b"SELECT 'a', 2.5, NULL", b"SHOW STREAMS", b"SELECT * FROM pg_type LIMIT 3",
                       b"BEGIN", b"COMMIT", b"ROLLBACK", b"SELECT $1", b"SET application_name = 'fz'", b"",
                       b"SELECT 1; SELECT 2", b"SHOW TABLES"])


def valid_session(rng: random.Random) -> bytes:
    """A plausible sequence of frontend messages (simple and extended protocol)."""
    out = b""
    for _ in range(rng.randint(1, 6)):
        choice = rng.randrange(5)
        if choice == 0:
            out += query(_sql(rng))
        elif choice == 1:
            name = rng.choice([b"", b"s1", b"s2"])
            out += parse(name, rng.choice([b"SELECT 1", b"SELECT $1::int + 1", b"SHOW STREAMS"]))
            out += bind(b"", name, (b"41",) if rng.random() < 0.5 else ())
            out += describe(b"P", b"") + execute(b"", rng.choice([0, 1, 5])) + SYNC
        elif choice == 2:
            out += describe(rng.choice([b"S", b"P"]), rng.choice([b"", b"s1"])) + SYNC
        elif choice == 3:
            out += close(rng.choice([b"S", b"P"]), rng.choice([b"", b"s1"])) + FLUSH + SYNC
        else:
            out += SYNC * rng.randint(1, 3)
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        if not buf:
            buf.append(rng.randrange(256))
            continue
        i = rng.randrange(len(buf))
        if op == 0:
            buf[i] = rng.randrange(256)
        elif op == 1:
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            del buf[i : i + rng.randint(1, 8)]
        elif op == 3:
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            buf[i : i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x00\x00\x00\x00",
                                         b"\x00\x00\x00\x03", b"\x00"])
    return bytes(buf)


def _bad_lengths(rng: random.Random) -> Case:
    kind = bytes([rng.choice(FRONTEND_TYPES)])
    length = rng.choice([-1, -(2**31), 0, 1, 2, 3, 2**31 - 1, 2**30, 64 * 1024 * 1024 + 5])
    return Case("bad_length", kind + struct.pack("!i", length) + b"xxxx", "close", sqlstates=("08P01",))


def _off_by_one(rng: random.Random) -> Case:
    body = rng.choice([b"SELECT 1\0", b"\0SELECT 1\0\0\0"])
    kind = b"Q" if body.startswith(b"S") else b"P"
    delta = rng.choice([-1, 1])
    # One byte short: the message lacks its NUL, the next byte is read as a message type.
    # One byte long: the next message's type byte is swallowed, its length read as a type.
    data = kind + struct.pack("!i", len(body) + 4 + delta) + body + SYNC + PROBE
    return Case("off_by_one_length", data, "reply")


def _unknown_type(rng: random.Random) -> Case:
    kind = rng.choice([b for b in range(256) if b not in FRONTEND_TYPES])
    return Case("unknown_type", bytes([kind]) + struct.pack("!i", 4), "close", sqlstates=("08P01",))


def _out_of_order(rng: random.Random) -> Case:
    variants: list[tuple[str, bytes]] = [
        ("bind_before_parse", bind(b"", b"nosuch") + SYNC),
        ("execute_unknown_portal", execute(b"nosuch") + SYNC),
        ("describe_unknown", describe(rng.choice([b"S", b"P"]), b"nosuch") + SYNC),
        ("close_unknown", close(rng.choice([b"S", b"P"]), b"nosuch") + SYNC),
        ("execute_without_bind", parse(b"", b"SELECT 1") + execute(b"") + SYNC),
        ("sync_storm", SYNC * rng.randint(50, 2000)),
        ("flush_storm", FLUSH * rng.randint(10, 500) + SYNC),
        ("copydata_outside_copy", msg(b"d", b"1\tx\n") * rng.randint(1, 50)),
        ("copydone_outside_copy", msg(b"c")),
        ("copyfail_outside_copy", msg(b"f", b"oops\0")),
        ("function_call", msg(b"F", b"\0\0\0\1\0\0\0\0\0\0")),
        ("duplicate_parse", parse(b"dup", b"SELECT 1") + parse(b"dup", b"SELECT 2") + SYNC),
        ("bind_wrong_param_count", parse(b"", b"SELECT $1::int") + bind(b"", b"", ()) + SYNC),
        ("bind_bad_format", parse(b"", b"SELECT 1")
         + msg(b"B", b"\0\0" + struct.pack("!hh", 1, 7) + struct.pack("!h", 0) + struct.pack("!h", 0)) + SYNC),
        ("describe_bad_target", msg(b"D", b"Z\0") + SYNC),
        ("close_bad_target", msg(b"C", b"Q\0") + SYNC),
        ("execute_after_error", parse(b"", b"SELEC oops") + bind(b"", b"") + execute(b"") + SYNC),
        ("sync_with_body", msg(b"S", b"junk")),
        ("flush_with_body", msg(b"H", b"junk") + SYNC),
        ("empty_query", query(b"")),
        ("parse_negative_oid_count", msg(b"P", b"\0SELECT 1\0" + struct.pack("!h", -5)) + SYNC),
        ("bind_negative_param_len", parse(b"", b"SELECT $1::text")
         + msg(b"B", b"\0\0" + struct.pack("!hh", 0, 1) + struct.pack("!i", -7) + struct.pack("!h", 0)) + SYNC),
        ("bind_huge_param_len", parse(b"", b"SELECT $1::text")
         + msg(b"B", b"\0\0" + struct.pack("!hh", 0, 1) + struct.pack("!i", 2**31 - 1) + struct.pack("!h", 0))
         + SYNC),
        ("binary_param_garbage", parse(b"", b"SELECT $1::int8", (20,))
         + msg(b"B", b"\0\0" + struct.pack("!hh", 1, 1) + struct.pack("!h", 1) + struct.pack("!i", 3) + b"abc"
               + struct.pack("!h", 0)) + execute(b"") + SYNC),
        ("unknown_param_oid", parse(b"", b"SELECT $1", (987654,)) + SYNC),
    ]
    name, data = rng.choice(variants)
    return Case(name, data + PROBE, "usable")


def _nul_in_strings(rng: random.Random) -> Case:
    sql = rng.choice([b"SELECT 1", b"SELECT 'a", b"DROP STREAM nothing_here"])
    tail = rng.choice([b"SELECT 2", b"", b"\0\0", b"DROP STREAM x"])
    if rng.random() < 0.6:
        # PostgreSQL 15 answers "invalid message format" (08P01) and stays usable.
        return Case("nul_in_query", msg(b"Q", sql + b"\0" + tail + b"\0") + PROBE, "usable",
                    sqlstates=("08P01", "22021"))
    return Case("nul_in_parse", msg(b"P", b"\0" + sql + b"\0" + tail + b"\0\0\0") + SYNC + PROBE, "usable",
                sqlstates=("08P01", "22021"))


def _invalid_utf8(rng: random.Random) -> Case:
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xe2\x28\xa1", b"\xf0\x90\x28\xbc", b"\xed\xa0\x80"])
    if rng.random() < 0.5:
        return Case("invalid_utf8_query", query(b"SELECT '" + bad + b"'") + PROBE, "usable", sqlstates=("22021",))
    return Case("invalid_utf8_bind", parse(b"", b"SELECT $1::text") + bind(b"", b"", (bad,)) + execute(b"")
                + SYNC + PROBE, "usable", sqlstates=("22021",))


def _startup_games(rng: random.Random, user: str, database: str) -> Case:
    good = startup_packet(user, database)
    variants: list[Case] = [
        Case("startup_len_negative", struct.pack("!i", -8) + b"\0" * 8, "close", False),
        Case("startup_len_small", struct.pack("!i", rng.randint(0, 7)) + b"\0" * 8, "close", False),
        Case("startup_len_huge", struct.pack("!i", rng.choice([10_001, 2**31 - 1])) + b"\0" * 8, "close", False),
        Case("startup_bad_version", startup_packet(user, database, rng.choice([0, 2 << 16, 4 << 16, 1234])),
             "close", False),
        Case("startup_no_user", struct.pack("!ii", 13, PROTOCOL_3_0) + b"a\0b\0\0", "close", False),
        Case("startup_unterminated", struct.pack("!ii", 14, PROTOCOL_3_0) + b"user\0xx", "close", False),
        Case("startup_invalid_utf8", struct.pack("!i", 4 + 4 + 10) + struct.pack("!i", PROTOCOL_3_0)
             + b"user\0\xff\xfe\0\0\0", "close", False),
        Case("ssl_then_plaintext", SSL_REQUEST + good + PROBE, "usable", False),
        Case("gss_then_plaintext", GSSENC_REQUEST + good + PROBE, "usable", False),
        Case("ssl_repeated", SSL_REQUEST * rng.randint(2, 5) + good + PROBE, "reply", False),
        # Without TLS the garbage is read as a startup packet, which may claim more bytes: may wait.
        Case("ssl_pipelined_garbage", SSL_REQUEST + bytes(rng.randrange(256) for _ in range(32)), "stall", False,
             hold=0.05),
        Case("ssl_after_startup", SSL_REQUEST + PROBE, "close", True, sqlstates=("08P01",)),
        Case("cancel_unknown_key", struct.pack("!iiii", 16, 80877102, rng.randrange(2**31), rng.randrange(2**31)),
             "close", False),
        Case("cancel_short", struct.pack("!ii", 8, 80877102), "close", False),
        Case("garbage_before_startup", bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))), "stall",
             False, hold=0.05),
    ]
    return rng.choice(variants)


def _half_sent(rng: random.Random, user: str, database: str) -> Case:
    if rng.random() < 0.3:
        packet = startup_packet(user, database)
        return Case("half_sent_startup", packet[: rng.randint(1, len(packet) - 1)], "stall", False,
                    hold=rng.uniform(0.05, 0.3))
    message = rng.choice([PROBE, parse(b"x", b"SELECT 1"), bind(b"", b""), SYNC])
    cut = rng.randint(1, len(message) - 1)
    return Case("half_sent_message", message[:cut], "stall", hold=rng.uniform(0.05, 0.3))


def _stalled(rng: random.Random) -> Case:
    return Case("stalled_after_startup", b"", "stall", hold=rng.uniform(0.1, 0.5))


def _mutated(rng: random.Random, user: str, database: str) -> Case:
    if rng.random() < 0.15:
        return Case("mutated_startup", mutate(startup_packet(user, database), rng), "stall", False, hold=0.1)
    return Case("mutated_session", mutate(valid_session(rng), rng), "stall", hold=0.1)


def make_case(seed: int, index: int, user: str, database: str) -> Case:
    rng = random.Random(seed * 1_000_003 + index)
    makers: list[tuple[float, Callable[[], Case]]] = [
        (8, lambda: _bad_lengths(rng)),
        (6, lambda: _off_by_one(rng)),
        (6, lambda: _unknown_type(rng)),
        (20, lambda: _out_of_order(rng)),
        (8, lambda: _nul_in_strings(rng)),
        (5, lambda: _invalid_utf8(rng)),
        (12, lambda: _startup_games(rng, user, database)),
        (8, lambda: _half_sent(rng, user, database)),
        (4, lambda: _stalled(rng)),
        (23, lambda: _mutated(rng, user, database)),
    ]
    pick = rng.uniform(0, sum(w for w, _ in makers))
    for weight, maker in makers:
        pick -= weight
        if pick <= 0:
            return maker()
    return makers[-1][1]()


# --- running a case -----------------------------------------------------------------------------

@dataclass
class Outcome:
    index: int
    family: str
    verdict: str  # ok | hang | wrong_answer | connect_failed
    detail: str = ""
    sqlstates: list[str] = field(default_factory=list)


def parse_backend(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Complete backend messages in `data` and the unparsed rest. The single-byte answers to
    SSLRequest/GSSENCRequest ('N'/'S') are handled by the caller."""
    out: list[tuple[bytes, bytes]] = []
    pos = 0
    while len(data) - pos >= 5:
        (length,) = struct.unpack("!i", data[pos + 1 : pos + 5])
        if length < 4 or len(data) - pos < length + 1:
            break
        out.append((data[pos : pos + 1], data[pos + 5 : pos + 1 + length]))
        pos += 1 + length
    return out, data[pos:]


def error_code(body: bytes) -> str:
    for part in body.split(b"\0"):
        if part[:1] == b"C":
            return part[1:].decode("ascii", "replace")
    return ""


class Connector:
    def __init__(self, host: str, port: int, user: str, database: str, timeout: float) -> None:
        self.host, self.port, self.user, self.database, self.timeout = host, port, user, database, timeout

    def open(self, do_startup: bool) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if do_startup:
            sock.sendall(startup_packet(self.user, self.database))
            data = b""
            deadline = time.monotonic() + 30
            while True:
                messages, _rest = parse_backend(data)
                if any(k == b"Z" for k, _ in messages):
                    break
                if any(k == b"E" for k, _ in messages):
                    raise ConnectionError("startup refused: " + repr(messages[-1][1][:200]))
                if time.monotonic() > deadline:
                    raise TimeoutError("no ReadyForQuery after startup")
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("server closed during startup")
                data += chunk
        return sock


def run_case(connector: Connector, case: Case, index: int) -> Outcome:
    try:
        sock = connector.open(case.do_startup)
    except (OSError, ConnectionError, TimeoutError) as e:
        return Outcome(index, case.family, "connect_failed", str(e))
    try:
        return _drive(sock, connector.timeout, case, index)
    finally:
        sock.close()


def _drive(sock: socket.socket, timeout: float, case: Case, index: int) -> Outcome:
    try:
        if case.payload:
            sock.sendall(case.payload)
    except OSError:
        pass  # the server may close while we still send (e.g. after a FATAL): judged below
    if case.expect == "stall":
        time.sleep(case.hold)
        return Outcome(index, case.family, "ok")
    data = b""
    closed = False
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
        if case.expect == "reply" and _without_encryption_answers(data, case):
            break
        if case.expect == "usable" and _probe_answered(data):
            break
    data = _without_encryption_answers(data, case)
    messages, _rest = parse_backend(data)
    states = [error_code(b) for k, b in messages if k == b"E"]
    if not data and not closed:
        return Outcome(index, case.family, "hang", f"no answer within {timeout}s", states)
    if case.sqlstates and states and states[0] not in case.sqlstates:
        return Outcome(index, case.family, "wrong_answer", f"first error {states[0]}, expected {case.sqlstates}",
                       states)
    if case.expect == "close" and any(k in (b"D", b"T") for k, _ in messages):
        return Outcome(index, case.family, "wrong_answer", "rows sent for a malformed message", states)
    if case.expect == "usable" and not _probe_answered(data):
        verdict = "wrong_answer" if closed else "hang"
        return Outcome(index, case.family, verdict,
                       f"connection {'closed' if closed else 'silent'} before SELECT 1 answered; got "
                       f"{[k for k, _ in messages]} {states}", states)
    if case.family == "nul_in_query" and any(k == b"D" for k, _ in messages[:-3]):
        return Outcome(index, case.family, "wrong_answer", "ran the query prefix before the NUL", states)
    return Outcome(index, case.family, "ok", "", states)


def _without_encryption_answers(data: bytes, case: Case) -> bytes:
    """`data` without the one-byte answers ('N') to SSLRequest/GSSENCRequest at its start."""
    if case.do_startup:
        return data
    requests = case.payload.count(SSL_REQUEST) + case.payload.count(GSSENC_REQUEST)
    skip = 0
    while skip < min(requests, len(data)) and data[skip : skip + 1] in (b"N", b"S"):
        skip += 1
    return data[skip:]


def _probe_answered(data: bytes) -> bool:
    messages, _rest = parse_backend(data)
    kinds = [k for k, _ in messages]
    for i, (kind, body) in enumerate(messages):
        if kind == b"C" and body.startswith(b"SELECT 1\0") and b"Z" in kinds[i:]:
            return True
    return False


# --- the healthy client -------------------------------------------------------------------------

class HealthyClient(threading.Thread):
    """SELECT 1 and INSERT + read-back every ~50 ms over psycopg; records errors and latency."""

    def __init__(self, dsn: str, interval: float = 0.05) -> None:
        super().__init__(name="healthy-client", daemon=True)
        self.dsn = dsn
        self.interval = interval
        self.stop_event = threading.Event()
        self.ops = 0
        self.errors: list[str] = []
        self.max_latency = 0.0
        self.table = f"fuzz_health_{random.randrange(10**9)}"

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute(f"CREATE TABLE {self.table} (id INT PRIMARY KEY, v TEXT)")
                n = 0
                while not self.stop_event.is_set():
                    n += 1
                    started = time.monotonic()
                    try:
                        one = conn.execute("SELECT 1").fetchone()
                        if one != (1,):
                            self.errors.append(f"SELECT 1 returned {one}")
                        conn.execute(f"INSERT INTO {self.table} VALUES (%s, %s)", (n, f"v{n}"))
                        got = conn.execute(f"SELECT v FROM {self.table} WHERE id = %s", (n,)).fetchall()
                        if got != [(f"v{n}",)]:
                            self.errors.append(f"read-back of row {n} gave {got}")
                    except psycopg.Error as e:
                        self.errors.append(f"{type(e).__name__}: {e}")
                        if conn.closed:
                            return
                    self.ops += 1
                    self.max_latency = max(self.max_latency, time.monotonic() - started)
                    self.stop_event.wait(self.interval)
                conn.execute(f"DROP TABLE {self.table}")
        except psycopg.Error as e:
            self.errors.append(f"{type(e).__name__}: {e}")


# --- the driver ---------------------------------------------------------------------------------

def fuzz(host: str, port: int, cases: int, seed: int, *, user: str = "streamdb", database: str = "streamdb",
         timeout: float = 1.0, concurrency: int = 4, only: int | None = None,
         alive: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Run `cases` cases (or only case `only`) and return the figures. `alive` (optional) says
    whether the server process is still running (checked after the run)."""
    connector = Connector(host, port, user, database, timeout)
    healthy = HealthyClient(f"postgresql://{user}@{host}:{port}/{database}")
    healthy.start()
    indexes = [only] if only is not None else list(range(cases))
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for outcome in pool.map(lambda i: run_case(connector, make_case(seed, i, user, database), i), indexes):
            outcomes.append(outcome)
    elapsed = time.monotonic() - started
    healthy.stop_event.set()
    healthy.join(30)
    crashed = alive is not None and not alive()
    if not crashed:
        try:
            with psycopg.connect(healthy.dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            crashed = True
    verdicts = Counter(o.verdict for o in outcomes)
    failures = [o for o in outcomes if o.verdict != "ok"]
    return {
        "seed": seed,
        "cases": len(outcomes),
        "seconds": round(elapsed, 2),
        "cases_per_second": round(len(outcomes) / elapsed, 1) if elapsed else 0.0,
        "crashes": int(crashed),
        "hangs": verdicts["hang"],
        "wrong_answers": verdicts["wrong_answer"],
        "connect_failures": verdicts["connect_failed"],
        "healthy_client": {"ops": healthy.ops, "errors": len(healthy.errors),
                           "max_latency_ms": round(healthy.max_latency * 1000, 1),
                           "first_errors": healthy.errors[:5]},
        "families": dict(sorted(Counter(o.family for o in outcomes).items())),
        "failures": [{"index": o.index, "family": o.family, "verdict": o.verdict, "detail": o.detail}
                     for o in failures[:20]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5432)
    ap.add_argument("--user", default="streamdb")
    ap.add_argument("--database", default="streamdb")
    ap.add_argument("--timeout", type=float, default=1.0, help="seconds the server has to answer a case")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--only", type=int, default=None, help="run only this case index (to reproduce)")
    args = ap.parse_args(argv)
    report = fuzz(args.host, args.port, args.cases, args.seed, user=args.user, database=args.database,
                  timeout=args.timeout, concurrency=args.concurrency, only=args.only)
    print(json.dumps(report, indent=2))
    bad = (report["crashes"] or report["hangs"] or report["wrong_answers"] or report["connect_failures"]
           or report["healthy_client"]["errors"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
