"""Garbage in a FILE source: invalid UTF-8, JSON nested 100,000 levels deep, and records far over
max_record_bytes are counted, dead-lettered with a reason (oversize ones with a bounded payload)
and never stop the source: the good records around them arrive."""

from __future__ import annotations

import json

from tests.source_util import wait_for


def test_file_source_survives_garbage_records(server, conn, unique):
    folder = server.data_dir / "files" / f"garbage_{unique}"
    folder.mkdir(parents=True)
    good = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(6)]
    huge = b'{"id": 99, "name": "' + b"x" * (3 * 1024 * 1024) + b'"}'  # 3 MiB, over the 1 MiB cap
    lines = [
        good[0],
        b'{"id": 100, "name": "caf\xe9"}',  # Latin-1, not UTF-8
        good[1],
        b"[" * 100_000,  # deeper than Python's recursion limit
        good[2],
        huge,
        good[3],
        b'{"id": 101, "name": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",  # deep but complete
        good[4],
        b"\xff\xfe\x00garbage",
        good[5],
    ]
    (folder / "001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    conn.execute(f"CREATE SOURCE CONNECTOR gc_{unique} FILE WITH (path = 'garbage_{unique}')")
    conn.execute(f"CREATE EXTERNAL STREAM g_{unique} (id INT, name TEXT) WITH (connector = 'gc_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl')")
    wait_for(conn, f"SELECT id FROM g_{unique} ORDER BY id", [(i,) for i in range(6)])
    wait_for(conn, f"SELECT count(*) FROM g_{unique}_errors", [(5,)])
    errors = conn.execute(f'SELECT "offset", reason, raw_value, raw_text FROM g_{unique}_errors').fetchall()
    by_offset = {off: (off, reason, len(raw), len(text.encode())) for off, reason, raw, text in errors}
    assert sorted(by_offset) == [1, 3, 5, 7, 9]
    assert "not UTF-8" in by_offset[1][1]
    assert "nested too deeply" in by_offset[3][1]
    assert "exceeds the limit of 1048576 bytes" in by_offset[5][1] and str(len(huge)) in by_offset[5][1]
    assert by_offset[5][2] <= 10_000 and by_offset[5][3] <= 10_000  # a bounded dead letter
    assert "nested too deeply" in by_offset[7][1]
    assert "not UTF-8" in by_offset[9][1]
    sources = {r[0]: r for r in conn.execute("SHOW SOURCES").fetchall()}
    name, _connector, _origin, _fmt, status, records, bad_records, dead_letters, error = sources[f"g_{unique}"]
    assert (status, records, bad_records, dead_letters, error) == ("running", 6, 5, f"g_{unique}_errors", None)
    # The source still works after the garbage: a new file with a good record and a smaller cap test.
    (folder / "002.jsonl").write_bytes(json.dumps({"id": 6, "name": "after"}).encode() + b"\n")
    wait_for(conn, f"SELECT count(*) FROM g_{unique}", [(7,)])
    conn.execute(f"DROP CONNECTOR gc_{unique} CASCADE")


def test_max_record_bytes_option_is_applied_per_stream(server, conn, unique):
    folder = server.data_dir / "files" / f"cap_{unique}"
    folder.mkdir(parents=True)
    lines = [json.dumps({"id": 1, "name": "short"}), json.dumps({"id": 2, "name": "y" * 200})]
    (folder / "001.jsonl").write_text("\n".join(lines) + "\n")
    conn.execute(f"CREATE SOURCE CONNECTOR cc_{unique} FILE WITH (path = 'cap_{unique}')")
    conn.execute(f"CREATE EXTERNAL STREAM c_{unique} (id INT, name TEXT) WITH (connector = 'cc_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl', max_record_bytes = 100)")
    wait_for(conn, f"SELECT id FROM c_{unique}", [(1,)])
    wait_for(conn, f"SELECT \"offset\", reason FROM c_{unique}_errors",
             [(1, f"record of {len(lines[1])} bytes exceeds the limit of 100 bytes (option max_record_bytes)")])
    conn.execute(f"DROP CONNECTOR cc_{unique} CASCADE")
