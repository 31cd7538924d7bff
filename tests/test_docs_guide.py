"""Every example in the user guide (docs/guide/**.md) runs against a real server, so the docs never drift.

The convention (docs/guide/CONTRIBUTING.md) in short: ```sql blocks run through `psql -X` in page
order and must succeed (pages share one server, emptied before each page); an ```output block right after a sql block is
compared with what psql printed (retried for up to 60 s, since views catch up asynchronously);
```sql error must fail (and print the following output block's text on stderr); ```sql push is a
push query that runs in the background while the next sql block runs, and must print the lines of
its output block; ```sql norun is shown, not run; ```sh run is a shell command that must succeed
(e.g. mosquitto_pub publishing what an MQTT stream reads). {{DATA_DIR}}, {{POSTGRES_DSN}}, the
Kafka address localhost:9092 and the MQTT broker localhost:1883 are replaced with the test's own.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from conftest import ROOT, ServerProcess
from markdown_it import MarkdownIt

GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.rglob("*.md"))
SQL_FLAGS = {"", "error", "push", "norun"}
RETRY_SECONDS = float(os.environ.get("GUIDE_RETRY_SECONDS", "60"))  # views catch up asynchronously
PSQL_TIMEOUT = 120.0
KAFKA_IN_DOCS = "localhost:9092"
MQTT_IN_DOCS = "localhost:1883"
SH_RUN = "sh run"  # a ```sh run block: a command run with bash, which must succeed
WILDCARD = "..."  # a push-output field that matches any value (e.g. an arrival time)


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    flag: str
    text: str
    output: str | None = None  # the ```output block that follows, if any
    output_line: int | None = None
    end: int = 0  # 0-based line just after the closing fence


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(ROOT)) if self.path.is_relative_to(ROOT) else str(self.path)

    def where(self, block: Block) -> str:
        return f"{self.rel}:{block.line}"


def parse_page(path: Path) -> Page:
    """The page's sql blocks in order, each with the output block right after it (blank lines allowed)."""
    page = Page(path)
    tokens = [t for t in MarkdownIt("commonmark").parse(path.read_text()) if t.type == "fence"]
    previous: Block | None = None
    for token in tokens:
        words = token.info.split()
        lang = words[0] if words else ""
        flag = " ".join(words[1:])
        line = token.map[0] + 1 if token.map else 0
        if lang == "output":
            # "Right after" means no other token between them; markdown-it drops blank lines.
            assert previous is not None and previous.output is None and _adjacent(path, previous, line), (
                f"{page.rel}:{line}: an ```output block must directly follow a ```sql block")
            previous.output, previous.output_line = token.content, line
            continue
        previous = None
        if lang == "sh" and flag == "run":
            page.blocks.append(Block(line, SH_RUN, token.content, end=token.map[1] if token.map else 0))
            continue
        if lang != "sql":
            continue
        assert flag in SQL_FLAGS, f"{page.rel}:{line}: unknown sql block flag {flag!r}; use one of {sorted(SQL_FLAGS)}"
        previous = Block(line, flag, token.content, end=token.map[1] if token.map else 0)
        page.blocks.append(previous)
    return page


def _adjacent(path: Path, block: Block, output_line: int) -> bool:
    """Only blank lines between the end of `block`'s fence and the output fence."""
    return all(not ln.strip() for ln in path.read_text().splitlines()[block.end:output_line - 1])


# --- running blocks ------------------------------------------------------------------------------------

@dataclass
class Context:
    server: ServerProcess
    substitutions: dict[str, str]
    work: Path

    def fill(self, text: str) -> str:
        for placeholder, value in self.substitutions.items():
            text = text.replace(placeholder, value)
        return text


def psql(ctx: Context, sql: str, *, quiet: bool) -> subprocess.CompletedProcess[str]:
    script = ctx.work / "block.sql"
    script.write_text(sql)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGCLIENTENCODING="UTF8", PGCONNECT_TIMEOUT="10")
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", ctx.server.host, "-p", str(ctx.server.port),
            "-U", "streamdb", "-d", "streamdb", "-f", str(script)]
    if quiet:
        args.insert(2, "-q")
    return subprocess.run(args, capture_output=True, text=True, timeout=PSQL_TIMEOUT, env=env)


def normalize(text: str) -> str:
    """Trailing whitespace per line and leading/trailing blank lines do not count."""
    return "\n".join(ln.rstrip() for ln in text.strip("\n").splitlines()).strip("\n")


def strip_psql_prefix(stderr: str) -> str:
    """psql -f prefixes messages with `psql:<file>:<line>: `; interactive psql (what the page shows) does not."""
    return re.sub(r"^psql:[^\n]*?:\d+: ", "", stderr, flags=re.M)


def diff(expected: str, got: str) -> str:
    return "\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(), "expected (page)", "got (psql)",
                                          lineterm=""))


def run_plain(ctx: Context, page: Page, block: Block) -> None:
    sql = ctx.fill(block.text)
    if block.output is None:
        out = psql(ctx, sql, quiet=False)
        assert out.returncode == 0, f"{page.where(block)}: the sql block failed:\n{out.stderr}\n{out.stdout[-2000:]}"
        return
    expected = normalize(ctx.fill(block.output))
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        out = psql(ctx, sql, quiet=True)
        got = normalize(out.stdout)
        if out.returncode == 0 and got == expected:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if out.returncode != 0:
        raise AssertionError(f"{page.where(block)}: the sql block failed (for {RETRY_SECONDS:.0f} s):\n{out.stderr}")
    raise AssertionError(f"{page.where(block)}: output differs from the ```output block at line {block.output_line} "
                         f"(after retrying for {RETRY_SECONDS:.0f} s):\n{diff(expected, got)}\n"
                         f"--- got, verbatim:\n{out.stdout}")


def run_error(ctx: Context, page: Page, block: Block) -> None:
    out = psql(ctx, ctx.fill(block.text), quiet=True)
    assert out.returncode != 0, f"{page.where(block)}: a ```sql error block succeeded:\n{out.stdout}"
    if block.output is not None:
        expected = normalize(ctx.fill(block.output))
        got = normalize(strip_psql_prefix(out.stderr))
        assert expected in got, (f"{page.where(block)}: the error printed differs from the ```output block at line "
                                 f"{block.output_line}:\nexpected (in stderr):\n{expected}\ngot:\n{got}")


class PushQuery:
    """A push query consumed in the background with COPY (...) TO STDOUT, so each change arrives as a line."""

    def __init__(self, ctx: Context, page: Page, block: Block) -> None:
        sql = ctx.fill(block.text).strip().rstrip(";").strip()
        assert ";" not in sql, f"{page.where(block)}: a ```sql push block holds one statement"
        self.sql = sql if sql.upper().startswith("COPY") else f"COPY ({sql}) TO STDOUT"
        self.dsn = ctx.server.dsn
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self.conn: psycopg.Connection | None = None
        self.cancelled = False
        self.thread = threading.Thread(target=self._consume, daemon=True)

    def _consume(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.conn = conn
                with conn.cursor() as cur, cur.copy(self.sql) as copy:
                    for data in copy:
                        self.lines.extend(bytes(data).decode().splitlines())
        except psycopg.Error as e:
            if not self.cancelled:
                self.error = e

    def start(self, ctx: Context) -> None:
        with ctx.server.connect() as conn:
            before = len(_push_queries(conn))
            self.thread.start()
            # Wait until it has sent its snapshot (the current result): the next block's writes
            # then come as changes after it.
            deadline = time.monotonic() + RETRY_SECONDS
            while len(_push_queries(conn)) <= before or any(
                    str(q[2]).startswith("starting") for q in _push_queries(conn)):
                if self.error is not None or time.monotonic() > deadline:
                    raise AssertionError(f"push query never started: {self.error}")
                time.sleep(0.1)

    def stop(self) -> None:
        self.cancelled = True
        if self.conn is not None:
            try:
                self.conn.cancel_safe()
            except psycopg.Error:
                pass
        self.thread.join(30)


def _push_queries(conn: psycopg.Connection) -> list[tuple]:
    return [q for q in conn.execute("SHOW QUERIES").fetchall() if q[1] == "push query"]


def _fields(line: str, sep: str) -> list[str]:
    return [f.strip() for f in line.split(sep)]


def _copy_fields(line: str) -> list[str]:
    return ["" if f == "\\N" else f for f in line.split("\t")]


def _line_matches(expected: list[str], got: list[str]) -> bool:
    return len(expected) == len(got) and all(e == WILDCARD or e == g for e, g in zip(expected, got, strict=True))


def check_push(ctx: Context, page: Page, block: Block, push: PushQuery) -> None:
    """Every line of the output block (fields split by tab or `|`, `...` matches anything) was pushed."""
    try:
        if block.output is None:
            time.sleep(1)
            assert push.error is None, f"{page.where(block)}: the push query failed: {push.error}"
            return
        wanted = []
        for ln in normalize(ctx.fill(block.output)).splitlines():
            if ln.strip():
                wanted.append(_fields(ln, "\t" if "\t" in ln else "|"))
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            got = [_copy_fields(ln) for ln in list(push.lines)]
            missing = [w for w in wanted if not any(_line_matches(w, g) for g in got)]
            if not missing or push.error is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert push.error is None, f"{page.where(block)}: the push query failed: {push.error}"
        assert not missing, (f"{page.where(block)}: lines of the ```output block at line {block.output_line} never "
                             f"arrived within {RETRY_SECONDS:.0f} s:\n"
                             + "\n".join(" | ".join(m) for m in missing)
                             + "\n--- got:\n" + "\n".join(" | ".join(g) for g in got))
    finally:
        push.stop()


def run_shell(ctx: Context, page: Page, block: Block) -> None:
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", ctx.fill(block.text)], capture_output=True, text=True,
                         timeout=PSQL_TIMEOUT, cwd=ctx.work)
    assert out.returncode == 0, f"{page.where(block)}: the ```sh run block failed (rc={out.returncode}):\n{out.stderr}"


def run_page(ctx: Context, page: Page) -> None:
    runnable = [b for b in page.blocks if b.flag != "norun"]
    pending: tuple[Block, PushQuery] | None = None
    for block in runnable:
        if block.flag == "push":
            assert pending is None, f"{page.where(block)}: a ```sql push block must be followed by a plain sql block"
            push = PushQuery(ctx, page, block)
            push.start(ctx)
            pending = (block, push)
            continue
        if block.flag == SH_RUN:
            assert pending is None, f"{page.where(block)}: a ```sql push block must be followed by a plain sql block"
            run_shell(ctx, page, block)
            continue
        if block.flag == "error":
            run_error(ctx, page, block)
        else:
            run_plain(ctx, page, block)
        if pending is not None:
            check_push(ctx, page, *pending)
            pending = None
    if pending is not None:
        pending[1].stop()
        raise AssertionError(f"{page.where(pending[0])}: a ```sql push block needs a sql block after it "
                             "(it writes what the push query shows)")


FRESH_SERVER_MARK = "<!-- guide-test: fresh-server -->"  # a page that must not share the server


class GuideServer:
    """One server for the guide's pages (a Spark start costs 10-15 s, a reset well under one):
    before each page everything a page can create is dropped and the sample data is copied
    afresh. A page that fails, or whose reset fails, gets the next page a new server."""

    def __init__(self, request) -> None:
        self.request = request
        self.tmp = tempfile.TemporaryDirectory(prefix="streamdb-guide-")
        self.work = Path(self.tmp.name)
        self.files = self.work / "files"
        self.extra_env = {"STREAMDB_FILE_ROOT": str(self.files)}
        self.substitutions = {"{{DATA_DIR}}": str(self.files)}
        self.server: ServerProcess | None = None
        self.starts = 0

    def use_kafka(self) -> None:
        if KAFKA_IN_DOCS not in self.substitutions:
            bootstrap = self.request.getfixturevalue("kafka_bootstrap")
            self.substitutions[KAFKA_IN_DOCS] = bootstrap
            self.extra_env["STREAMDB_KAFKA_BOOTSTRAP"] = bootstrap
            self.stop()  # the server's kafka_bootstrap setting is read at start

    def use_mqtt(self) -> None:
        if MQTT_IN_DOCS not in self.substitutions:
            self.substitutions[MQTT_IN_DOCS] = self.request.getfixturevalue("mqtt_broker").address

    def use_postgres(self) -> None:
        if "{{POSTGRES_DSN}}" not in self.substitutions:
            self.substitutions["{{POSTGRES_DSN}}"] = self.request.getfixturevalue("postgres_server")

    def for_page(self, fresh: bool) -> ServerProcess:
        if self.server is not None and (fresh or not self._reset()):
            self.stop()
        if self.files.exists():
            shutil.rmtree(self.files)
        if (GUIDE / "data").is_dir():
            shutil.copytree(GUIDE / "data", self.files)
        self.files.mkdir(exist_ok=True)
        if self.server is None:
            self.starts += 1
            data = self.work / f"data-{self.starts}"
            self.server = ServerProcess(data, "guide", extra_env=dict(self.extra_env))
            self.server.start(timeout=120)
        return self.server

    def _reset(self) -> bool:
        """Drop every sink, relation, connector and role a page made; False if anything is left."""
        assert self.server is not None
        try:
            with self.server.connect() as conn:
                for (name, *_rest) in conn.execute("SHOW SINKS").fetchall():
                    conn.execute(f'DROP SINK IF EXISTS "{name}"')
                kinds = {"stream": "STREAM", "table": "TABLE", "materialized view": "MATERIALIZED VIEW", "view": "VIEW"}
                for _ in range(3):  # dependents first; CASCADE takes the rest
                    for name, kind in conn.execute("SHOW ALL").fetchall():
                        conn.execute(f'DROP {kinds.get(kind, "TABLE")} IF EXISTS "{name}" CASCADE')
                for (name, *_rest) in conn.execute("SHOW CONNECTORS").fetchall():
                    conn.execute(f'DROP CONNECTOR IF EXISTS "{name}" CASCADE')
                for (role,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname <> 'streamdb'").fetchall():
                    conn.execute(f'DROP ROLE IF EXISTS "{role}"')
                left = conn.execute("SHOW ALL").fetchall() + conn.execute("SHOW CONNECTORS").fetchall()
                return not left
        except psycopg.Error:
            return False

    def stop(self) -> None:
        if self.server is not None:
            try:
                self.server.stop()
            except Exception:  # noqa: BLE001 - a server that is already gone is fine
                pass
            self.server = None

    def close(self) -> None:
        self.stop()
        self.tmp.cleanup()


@pytest.fixture(scope="module")
def guide_server(request) -> Iterator[GuideServer]:
    guide = GuideServer(request)
    try:
        yield guide
    finally:
        guide.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(GUIDE)) for p in PAGES])
def test_guide_page_examples_run(path: Path, guide_server: GuideServer) -> None:
    page = parse_page(path)
    if not any(b.flag != "norun" for b in page.blocks):
        return  # nothing to run; the page's blocks were still checked against the convention
    text = path.read_text()
    if KAFKA_IN_DOCS in text:
        guide_server.use_kafka()
    if "{{POSTGRES_DSN}}" in text:
        guide_server.use_postgres()
    if MQTT_IN_DOCS in text:
        guide_server.use_mqtt()
    server = guide_server.for_page(fresh=FRESH_SERVER_MARK in text)
    failure = None
    try:
        ctx = Context(server, dict(guide_server.substitutions), guide_server.work)
        run_page(ctx, page)
        hook = PAGE_HOOKS.get(path.relative_to(GUIDE).as_posix())
        if hook is not None:
            hook(ctx, page)
    except AssertionError as e:
        failure = str(e)
    if failure is not None:
        log = server.log_path
        guide_server.stop()  # whatever the page left behind, the next page starts clean
        pytest.fail(f"{failure}\n(server log: {log})", pytrace=False)


# --- per-page hooks: checks a page needs beyond the convention, run after its blocks ---------------------

SHOWN_PSQL = re.compile(r'^psql "(?P<dsn>[^"]+)" -c "(?P<query>[^"]+)"$')


def check_postgres_results(ctx: Context, page: Page) -> None:
    """connectors.md (helper F2) shows what its Postgres sink wrote as a ```sh block `psql "<dsn>" -c
    "<query>"` followed by a ```text block. Run the query on the test's PostgreSQL and compare,
    retrying: the sink delivers in the background."""
    tokens = [t for t in MarkdownIt("commonmark").parse(page.path.read_text()) if t.type == "fence"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    checked = 0
    for shown, result in zip(tokens, tokens[1:], strict=False):
        command = SHOWN_PSQL.match(shown.content.strip()) if shown.info.strip() == "sh" else None
        if command is None or result.info.strip() != "text":
            continue
        where = f"{page.rel}:{shown.map[0] + 1 if shown.map else 0}"
        args = ["psql", "-X", ctx.substitutions["{{POSTGRES_DSN}}"], "-c", command["query"]]
        expected = normalize(result.content)
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            out = subprocess.run(args, capture_output=True, text=True, timeout=PSQL_TIMEOUT, env=env)
            if out.returncode == 0 and normalize(out.stdout) == expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert out.returncode == 0, f"{where}: the query on PostgreSQL failed:\n{out.stderr}"
        assert normalize(out.stdout) == expected, (f"{where}: PostgreSQL holds other rows than the ```text block "
                                                   f"shows:\n{diff(expected, normalize(out.stdout))}")
        checked += 1
    assert checked, f"{page.rel}: no ```sh psql \"<dsn>\" -c \"<query>\" block followed by a ```text block to check"


PAGE_HOOKS = {"connectors.md": check_postgres_results}


# --- the guide hangs together ----------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_guide_index_links_every_page_and_links_resolve() -> None:
    index = GUIDE / "index.md"
    assert index.exists(), "docs/guide/index.md is the guide's table of contents"
    linked = {(GUIDE / m.split("#")[0]).resolve() for m in LINK.findall(index.read_text())
              if not m.startswith(("http:", "https:", "#"))}
    unlinked = [str(p.relative_to(GUIDE)) for p in PAGES
                if p.name != "index.md" and p.name != "CONTRIBUTING.md" and p.resolve() not in linked]
    assert not unlinked, f"docs/guide/index.md does not link these pages: {unlinked}"
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http:", "https:", "mailto:", "#")):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def test_guide_convention_parser(tmp_path: Path) -> None:
    """The parser pairs output blocks with the sql block right before them, and refuses strays."""
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```sql\nSELECT 1;\n```\n\n\n```output\n x\n```\n\ntext\n\n```sql error\nSELECT nope;\n```\n"
                    "\n```sql push\nSELECT * FROM s EMIT CHANGES\n```\n\n```sql norun\nSELECT 2;\n```\n\n```sh\nls\n```\n")
    parsed = parse_page(page)
    assert [(b.line, b.flag, b.output, b.output_line) for b in parsed.blocks] == [
        (3, "", " x\n", 8), (14, "error", None, None), (18, "push", None, None), (22, "norun", None, None)]
    page.write_text("```sql\nSELECT 1;\n```\n\nsome words\n\n```output\n x\n```\n")
    with pytest.raises(AssertionError, match="must directly follow"):
        parse_page(page)
    page.write_text("```sql bogus\nSELECT 1;\n```\n")
    with pytest.raises(AssertionError, match="unknown sql block flag"):
        parse_page(page)
    assert _line_matches(["insert", WILDCARD, "s2", "31.5"], _copy_fields("insert\t2026-01-01 10:00:00+00\ts2\t31.5"))
    assert not _line_matches(["insert", WILDCARD, "s2"], _copy_fields("insert\tx\ts2\t31.5"))
    assert strip_psql_prefix("psql:/tmp/b.sql:3: ERROR:  boom\n") == "ERROR:  boom\n"


# --- writing pages: fill the output blocks from the product -----------------------------------------------

def fill_page(path: Path) -> None:
    """Run a page and rewrite its ```output blocks with what the product printed. A writing aid:
    read every filled block before keeping it (the output is the product's, right or wrong)."""
    page = parse_page(path)
    text = path.read_text()
    filled: dict[int, str] = {}  # output fence line -> new content
    with tempfile.TemporaryDirectory(prefix="streamdb-guide-fill-") as d:
        work, files = Path(d), Path(d) / "files"
        if (GUIDE / "data").is_dir():
            shutil.copytree(GUIDE / "data", files)
        files.mkdir(exist_ok=True)
        assert KAFKA_IN_DOCS not in text and "{{POSTGRES_DSN}}" not in text and MQTT_IN_DOCS not in text, (
            "fill mode runs pages without services")
        server = ServerProcess(work / "data", f"guide-fill-{path.stem}", extra_env={"STREAMDB_FILE_ROOT": str(files)})
        server.start(timeout=120)
        ctx = Context(server, {"{{DATA_DIR}}": str(files)}, work)
        pending: tuple[Block, PushQuery] | None = None
        try:
            for block in [b for b in page.blocks if b.flag != "norun"]:
                if block.flag == SH_RUN:
                    run_shell(ctx, page, block)
                    continue
                if block.flag == "push":
                    pending = (block, PushQuery(ctx, page, block))
                    pending[1].start(ctx)
                    continue
                sql = ctx.fill(block.text)
                if block.flag == "error":
                    out = psql(ctx, sql, quiet=True)
                    print(f"{page.where(block)}: rc={out.returncode}\n{out.stderr}")
                    if block.output_line is not None:
                        filled[block.output_line] = (normalize(strip_psql_prefix(out.stderr)).splitlines() or [""])[0] + "\n"
                elif block.output_line is not None:
                    psql(ctx, "FLUSH;", quiet=True)
                    out = psql(ctx, sql, quiet=True)
                    print(f"{page.where(block)}: rc={out.returncode}\n{out.stdout}{out.stderr}")
                    filled[block.output_line] = normalize(out.stdout if out.returncode == 0 else out.stderr) + "\n"
                else:
                    out = psql(ctx, sql, quiet=False)
                    print(f"{page.where(block)}: rc={out.returncode}\n{out.stdout[-1500:]}{out.stderr}")
                if pending is not None:
                    time.sleep(3)
                    push_block, push = pending
                    push.stop()
                    if push_block.output_line is not None:
                        rows = [_copy_fields(ln) for ln in push.lines]
                        filled[push_block.output_line] = "".join(
                            " | ".join(r[:1] + [WILDCARD] + r[2:]) + "\n" for r in rows)
                    pending = None
        finally:
            server.stop()
    lines = text.splitlines(keepends=True)
    tokens = [t for t in MarkdownIt("commonmark").parse(text) if t.type == "fence" and t.map]
    for token in sorted(tokens, key=lambda t: -t.map[0]):  # type: ignore[index]
        start, end = token.map  # type: ignore[misc]
        if start + 1 in filled:
            lines[start + 1:end - 1] = [filled[start + 1]]
    path.write_text("".join(lines))


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        fill_page(Path(arg).resolve())
