"""A FILE source connector: an external stream over a directory of JSON-lines files."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.source_util import wait_for


def test_file_source_reads_new_files_and_keeps_bad_lines(server, conn, unique):
    folder = server.data_dir / "files" / f"in_{unique}"
    folder.mkdir(parents=True)
    (folder / "001.jsonl").write_text("\n".join(json.dumps({"id": i, "name": f"n{i}"}) for i in range(3)) + "\n")
    conn.execute(f"CREATE SOURCE CONNECTOR files_{unique} FILE WITH (path = 'in_{unique}')")
    conn.execute(f"CREATE EXTERNAL STREAM people_{unique} (id INT, name TEXT) WITH (connector = 'files_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl')")
    conn.execute(f"CREATE MATERIALIZED VIEW people_n_{unique} AS SELECT count(*) AS n FROM people_{unique}")
    wait_for(conn, f"SELECT count(*) FROM people_{unique}", [(3,)])
    # A new file is picked up; an in-progress (.tmp) file is not, until it is renamed.
    (folder / "002.jsonl").write_text(json.dumps({"id": 3, "name": "n3"}) + "\n{oops\n")
    (folder / "003.jsonl.tmp").write_text(json.dumps({"id": 4, "name": "n4"}) + "\n")
    (folder / "notes.txt").write_text("not matched by the pattern\n")
    wait_for(conn, f"SELECT count(*) FROM people_{unique}", [(4,)])
    wait_for(conn, f"SELECT count(*) FROM people_{unique}_errors", [(1,)])
    (folder / "003.jsonl.tmp").rename(folder / "003.jsonl")
    wait_for(conn, f"SELECT count(*) FROM people_{unique}", [(5,)])
    conn.execute("FLUSH")
    assert conn.execute(f"SELECT n FROM people_n_{unique}").fetchone() == (5,)
    err = conn.execute(f"SELECT source, \"offset\", raw_text, reason FROM people_{unique}_errors").fetchone()
    assert err[:3] == ("002.jsonl", 1, "{oops") and err[3].startswith("invalid JSON")
    for path in ("../../etc", "/etc"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            conn.execute(f"CREATE SOURCE CONNECTOR esc_{unique} FILE WITH (path = '{path}')")
        assert "outside the server's file root" in str(e.value)
    conn.execute(f"DROP CONNECTOR files_{unique} CASCADE")


def test_file_source_leaves_out_late_events_and_counts_them(server, conn, unique):
    """A record older than its stream's watermark is a good record but late: it is left out of
    the stream (no view sees it), counted, and the source moves past it (no dead letter)."""
    folder = server.data_dir / "files" / f"late_{unique}"
    folder.mkdir(parents=True)
    seconds = [10, 20, 12, 16, 30]  # watermark 15 after 20: 12 is late, 16 is not
    (folder / "001.jsonl").write_text("".join(
        json.dumps({"id": i, "ts": f"2024-01-01T00:00:{s:02d}Z"}) + "\n" for i, s in enumerate(seconds)))
    conn.execute(f"CREATE SOURCE CONNECTOR late_files_{unique} FILE WITH (path = 'late_{unique}')")
    conn.execute(f"CREATE EXTERNAL STREAM ev_{unique} (id INT, ts TIMESTAMPTZ, "
                 f"WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH (connector = 'late_files_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl')")
    conn.execute(f"CREATE MATERIALIZED VIEW ev_ids_{unique} AS SELECT id FROM ev_{unique}")
    wait_for(conn, f"SELECT count(*), sum(id) FROM ev_{unique}", [(4, 0 + 1 + 3 + 4)])
    conn.execute("FLUSH")
    assert sorted(conn.execute(f"SELECT id FROM ev_ids_{unique}").fetchall()) == [(0,), (1,), (3,), (4,)]
    assert dict(conn.execute(f"DESCRIBE ev_{unique}").fetchall())["late events"] == "1"
    assert conn.execute(f"SELECT count(*) FROM ev_{unique}_errors").fetchone() == (0,)
    conn.execute(f"DROP CONNECTOR late_files_{unique} CASCADE")
