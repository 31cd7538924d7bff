"""The web console (docs/console.md) against a real `streamdb serve`: its JSON API over plain HTTP, and
the page itself in a real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ARTIFACTS, ROOT, ServerProcess
from tests.source_util import wait_for
from tests.test_e2e_push import push_queries, wait_subscribed
from tests.test_e2e_security import NO_SPARK, PasswordServer
from tests.tls_certs import make_test_certificates

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def console_url(server: ServerProcess, path: str = "", scheme: str = "http") -> str:
    return f"{scheme}://{server.host}:{server.console_port}{path}"


def http(url: str, body: dict[str, Any] | None = None, auth: tuple[str, str] | None = None,
         headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None) -> tuple[int, Any]:
    """(status, parsed JSON or text) of a GET, or a POST of `body` as JSON."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=60, context=tls) as response:
            status, raw, kind = response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, kind = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, json.loads(raw) if kind.startswith("application/json") else raw.decode()


def stats_item(server: ServerProcess, name: str) -> dict[str, Any] | None:
    _, stats = http(console_url(server, "/api/stats"))
    return next((i for i in stats["items"] if i["name"] == name), None)


# --- the JSON API over plain HTTP ----------------------------------------------------------------

def test_console_api_runs_sql_and_reports_stats(server, conn, unique):
    s, v = f"clicks_{unique}", f"clicks_per_user_{unique}"
    conn.execute(f"CREATE STREAM {s} (user_id INT, url TEXT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT user_id, count(*) AS n FROM {s} GROUP BY user_id")
    status, objects = http(console_url(server, "/api/objects"))
    assert status == 200 and objects["user"] == "streamdb"
    by_name = {o["name"]: o for o in objects["objects"]}
    assert by_name[s]["kind"] == "stream"
    assert [c["name"] for c in by_name[s]["columns"]] == ["user_id", "url"]
    assert by_name[v]["kind"] == "materialized_view"

    status, out = http(console_url(server, "/api/sql"),
                       {"sql": f"INSERT INTO {s} VALUES (1, 'a'), (1, 'b'), (2, 'c'); FLUSH"})
    assert status == 200 and [r["command"] for r in out["results"]] == ["INSERT 0 3", "FLUSH"]
    _, out = http(console_url(server, "/api/sql"), {"sql": f"SELECT user_id, n FROM {v} ORDER BY user_id"})
    (result,) = out["results"]
    assert [c["name"] for c in result["columns"]] == ["user_id", "n"]
    assert result["rows"] == [[1, 2], [2, 1]]

    _, out = http(console_url(server, "/api/sql"), {"sql": f"SELECT * FROM no_such_{unique}"})
    assert out["sqlstate"] == "42P01" and f"no_such_{unique}" in out["error"]
    _, out = http(console_url(server, "/api/sql"), {"sql": "SELECT 1; SELEC 2"})
    assert out["sqlstate"] == "42601" and out["position"] == 11  # counted in the whole text, as psql does

    # Stats come from the engine: the stream's rows and the view's processed input and lag.
    deadline = time.monotonic() + 30
    while True:
        stream, view = stats_item(server, s), stats_item(server, v)
        if stream and view and stream["rows"] == 3 and view["rows"] == 2 and view["lag"] == 0:
            break
        assert time.monotonic() < deadline, (stream, view)
        time.sleep(0.5)
    assert view["input_total"] == 3 and view["epochs"] >= 1 and view["freshness_ms"] == 0
    assert stream["history"] and stream["history"][-1]["rows"] == 3

    status, text = http(console_url(server, "/"))
    assert status == 200 and "<title>StreamDB console</title>" in text


def test_console_refuses_other_web_sites(server, unique):
    """A page on another site must not run SQL through the user's browser (CSRF, cross-site WebSocket
    hijacking, DNS rebinding): the console is a superuser editor when authentication is 'trust'."""
    insert = {"sql": f"CREATE TABLE pwned_{unique} (k INT)"}
    status, text = http(console_url(server, "/api/sql"), insert, headers={"Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in text
    status, text = http(console_url(server, "/api/sql"), insert, headers={"Content-Type": "text/plain"})
    assert status == 415  # a form post needs no CORS preflight: only JSON is taken
    status, text = http(console_url(server, "/api/objects"), headers={"Host": f"evil.example:{server.console_port}"})
    assert status == 403 and "loopback" in text
    _, out = http(console_url(server, "/api/sql"), {"sql": f"SELECT count(*) FROM pwned_{unique}"})
    assert out["sqlstate"] == "42P01"  # nothing of the refused requests ran
    handshake = (f"GET /api/push HTTP/1.1\r\nHost: {server.host}:{server.console_port}\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\nOrigin: http://evil.example\r\n\r\n")
    with socket.create_connection((server.host, server.console_port), timeout=30) as sock:
        sock.sendall(handshake.encode())
        assert sock.recv(200).startswith(b"HTTP/1.1 403")


def test_busy_console_port_fails_with_a_clear_message(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "streamdb.cli", "serve", "--port", "0", "--console-port", str(port),
             "--data-dir", str(tmp_path / "data")],
            capture_output=True, text=True, timeout=120, cwd=str(ROOT),
            env={**os.environ, **NO_SPARK})
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} for the web console and /metrics" in result.stderr
    assert "--console-port" in result.stderr


def test_no_console_keeps_metrics_and_passwords_guard_the_console():
    with tempfile.TemporaryDirectory(prefix="streamdb-console-") as d:
        srv = PasswordServer(Path(d) / "data", "console-auth", extra_env=NO_SPARK, extra_args=["--no-console"])
        srv.start()
        try:
            assert http(console_url(srv, "/api/objects"))[0] == 404
            status, text = http(console_url(srv, "/metrics"))
            assert status == 200 and "streamdb_" in text
            with srv.connect() as c:
                c.execute("CREATE USER alice WITH PASSWORD 'wonder-land-9'")
                c.execute("CREATE TABLE secrets (k INT PRIMARY KEY, v TEXT)")
            srv.stop()
            # Passwords on (and TLS, which the console then serves HTTPS with).
            certs = make_test_certificates(Path(d) / "tls")
            srv.extra_args = ["--auth-method", "scram-sha-256", "--tls-cert-file", str(certs.cert),
                              "--tls-key-file", str(certs.key)]
            srv.user, srv.password = "alice", "wonder-land-9"  # the readiness probe logs in as alice
            srv.sslmode = "require"
            srv.start()
            tls = ssl.create_default_context(cafile=str(certs.ca))
            alice = ("alice", "wonder-land-9")

            def api(path: str, body: dict[str, Any] | None = None, auth: tuple[str, str] | None = alice):
                return http(console_url(srv, path, "https"), body, auth=auth, tls=tls)

            assert api("/api/objects", auth=None)[0] == 401
            assert api("/api/sql", {"sql": "SELECT 1"}, auth=None)[0] == 401
            assert api("/api/objects", auth=("alice", "wrong"))[0] == 401
            status, objects = api("/api/objects")
            assert status == 200 and objects["user"] == "alice"
            # SQL runs as the authenticated role, with its privileges: no superuser editor.
            assert api("/api/sql", {"sql": "SELECT current_user"})[1]["results"][0]["rows"] == [["alice"]]
            assert api("/api/sql", {"sql": "SELECT * FROM secrets"})[1]["sqlstate"] == "42501"
            assert api("/metrics", auth=None)[0] == 200
        finally:
            srv.stop()


# --- the page in headless Chromium ---------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    subprocess.run([str(ROOT / "scripts" / "ensure-chromium.sh")], check=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture()
def page(browser) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_default_timeout(60_000)
    yield page
    context.close()
    assert not errors, f"JavaScript errors in the console: {errors}"


def table_rows(page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"{selector} tbody tr",
                                     "trs => trs.map(tr => [...tr.cells].map(td => td.textContent))")


def test_console_in_chromium_queries_pushes_and_charts(server, conn, unique, page):
    s, v = f"orders_{unique}", f"revenue_{unique}"
    conn.execute(f"CREATE STREAM {s} (item TEXT, amount INT)")
    conn.execute(f"CREATE MATERIALIZED VIEW {v} AS SELECT item, sum(amount) AS total FROM {s} GROUP BY item")
    conn.execute(f"INSERT INTO {s} VALUES ('apple', 3), ('pear', 5)")
    conn.execute("FLUSH")
    page.goto(console_url(server))
    # The objects list shows both, with their kinds.
    page.wait_for_selector(f'#objects li[data-name="{s}"][data-kind="stream"]')
    page.wait_for_selector(f'#objects li[data-name="{v}"][data-kind="materialized_view"]')

    # A query in the editor, its rows rendered.
    page.fill("#sql", f"SELECT item, total FROM {v} ORDER BY item")
    page.click("#run")
    page.wait_for_selector("#result table tbody tr")
    assert table_rows(page, "#result table") == [["apple", "3"], ["pear", "5"]]
    assert page.inner_text("#result table thead").split() == ["item", "text", "total", "bigint"]

    # The charts of the stream and the view, before the new events.
    stream_card = f'.chart[data-name="{s}"]'
    view_card = f'.chart[data-name="{v}"]'
    page.wait_for_function("([sel]) => document.querySelector(sel + ' .rows-value')?.textContent === '2'",
                           arg=[stream_card])
    page.wait_for_function("([sel]) => document.querySelector(sel + ' .rows-value')?.textContent === '2'",
                           arg=[view_card])
    rows_path_before = page.get_attribute(f"{stream_card} path.rows", "d")

    # A push query: the page shows the current rows (the snapshot), then new rows as events arrive.
    before = len(push_queries(conn))
    page.fill("#sql", f"SELECT item, amount FROM {s} WHERE amount > 1 EMIT CHANGES")
    page.click("#run")
    page.wait_for_selector("#push-result thead")
    wait_subscribed(conn, before)
    page.wait_for_selector('.chart[data-name^="push query"]')  # running queries are charted too
    conn.execute(f"INSERT INTO {s} VALUES ('apple', 4), ('plum', 1), ('kiwi', 7)")
    page.wait_for_function("() => document.querySelectorAll('#push-result tbody tr').length >= 4")
    pushed = table_rows(page, "#push-result")
    assert sorted((r[0], r[2], r[3]) for r in pushed) == [
        ("insert", "apple", "3"), ("insert", "apple", "4"), ("insert", "kiwi", "7"), ("insert", "pear", "5")]
    assert all(r[1].startswith("20") for r in pushed)  # each change carries its time

    # The charts follow: the stream's row counter and line, the view's rows (3 items now).
    page.wait_for_function("([sel]) => document.querySelector(sel + ' .rows-value').textContent === '5'",
                           arg=[stream_card])
    page.wait_for_function("([sel]) => document.querySelector(sel + ' .rows-value').textContent === '4'",
                           arg=[view_card])
    assert page.get_attribute(f"{stream_card} path.rows", "d") != rows_path_before
    rate_path = page.get_attribute(f"{stream_card} path.rate", "d")
    assert rate_path and any(float(p.split(",")[1]) < 50 for p in rate_path.replace("M", "L").split("L")[1:-2]
                             if "," in p)  # a visible peak of input rate, not a flat line at the bottom
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-push.png"), full_page=True)

    # Stopping the push query ends it on the server.
    page.click("#stop")
    deadline = time.monotonic() + 30
    while len(push_queries(conn)) > before:
        assert time.monotonic() < deadline, "push query still running after Stop"
        time.sleep(0.2)

    # An invalid query shows the message and its SQLSTATE.
    page.fill("#sql", f"SELECT nope FROM {s}")
    page.click("#run")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error .sqlstate") == "42703"
    assert 'column "nope" does not exist' in page.inner_text("#error .message")
    page.screenshot(path=str(ARTIFACTS / "console-error.png"), full_page=True)


def test_console_in_chromium_shows_dead_letters(server, conn, unique, page):
    folder = server.data_dir / "files" / f"console_in_{unique}"
    folder.mkdir(parents=True)
    (folder / "001.jsonl").write_text('{"id": 1, "name": "ada"}\n{oops\n{"id": 2, "name": "bob"}\n')
    conn.execute(f"CREATE SOURCE CONNECTOR cfiles_{unique} FILE WITH (path = 'console_in_{unique}')")
    s = f"people_{unique}"
    conn.execute(f"CREATE EXTERNAL STREAM {s} (id INT, name TEXT) WITH (connector = 'cfiles_{unique}', "
                 "value_format = 'json', pattern = '*.jsonl')")
    wait_for(conn, f"SELECT count(*) FROM {s}_errors", [(1,)])
    status, out = http(console_url(server, f"/api/dead-letters?source={s}"))
    assert status == 200 and out["dead_letters"] == f"{s}_errors"
    cols = [c["name"] for c in out["columns"]]
    record = dict(zip(cols, out["rows"][0], strict=True))
    assert record["source"] == "001.jsonl" and record["raw_text"] == "{oops"
    assert record["reason"].startswith("invalid JSON")
    assert http(console_url(server, f"/api/dead-letters?source=no_such_{unique}"))[0] == 404

    page.goto(console_url(server))
    page.wait_for_selector(f'#dl-source option[value="{s}"]', state="attached")
    page.select_option("#dl-source", s)
    page.click("#dl-load")
    page.wait_for_selector("#dead-letters table tbody tr")
    headers = page.eval_on_selector_all("#dead-letters th", "ths => ths.map(th => th.firstChild.textContent)")
    (row,) = table_rows(page, "#dead-letters table")
    shown = dict(zip(headers, row, strict=True))
    assert shown["raw_text"] == "{oops" and shown["source"] == "001.jsonl"
    # The source's chart counts the bad record as an error.
    card = f'.chart[data-name="{s}"]'
    page.wait_for_function("([sel]) => document.querySelector(sel + ' .errors-value')?.textContent === '1'",
                           arg=[card])
    assert page.inner_text(f"{card} .rows-value") == "2"
    page.screenshot(path=str(ARTIFACTS / "console-dead-letters.png"), full_page=True)
    conn.execute(f"DROP CONNECTOR cfiles_{unique} CASCADE")
