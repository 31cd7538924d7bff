"""Run Nexmark queries on Apache Flink SQL (PyFlink, local MiniCluster) over the generator's event files.

The streaming peer of the StreamDB Nexmark benchmark. Flink comes from PyPI (`apache-flink`) in its own
virtualenv, bench/.flink-venv (bench/flink/setup.sh installs it); this script runs with the project's
Python and launches that venv's Python as a subprocess -- this same file with --worker -- for each query
and run, so every run gets a fresh JVM, a fresh TableEnvironment (streaming mode) and a fresh MiniCluster.

    python bench/nexmark/run_flink.py --events DIR --queries q0,q1,q2 [--runs 3] [--parallelism 2] \\
        --out FILE.json

DIR holds person.jsonl, auction.jsonl, bid.jsonl and meta.json ({"events": N, ...}) as written by
bench/nexmark/generator.py. Each query is bench/nexmark/flink_queries/ddl.sql (the three source tables
over DIR: filesystem connector, json format, date_time as event time with a watermark) followed by
flink_queries/qN.sql (a 'blackhole' sink table and the INSERT INTO it, adapted from nexmark-flink).
The sources are bounded, so each streaming job ends when the files are read.

Per run (all from the worker's clock, except startup and memory):
- startup_seconds: process spawn -> TableEnvironment ready (Python + PyFlink import + gateway JVM start);
- seconds: INSERT submitted (execute_sql: planning, job graph, MiniCluster start) -> job finished;
- events_per_s: N / seconds, N = meta.json "events" (all events, whichever tables the query reads);
- cpu_seconds: user + system CPU of the process tree (worker Python + Flink JVM) over `seconds`, from
  /proc; cores_used = cpu_seconds / seconds;
- peak_rss_mib: peak resident memory of that tree (sum of VmRSS sampled every 20 ms, and the sum of
  the per-process high-water marks VmHWM taken when the job has finished, whichever is larger).
On stderr each run also shows Flink's own net job runtime (JobExecutionResult.getNetRuntime()).

Flink settings: parallelism --parallelism (default 2), JVM heap --heap (default 1536m; the MiniCluster
runs in the gateway JVM), state backend --state-backend (default rocksdb, as nexmark-flink's config.yaml;
'hashmap' keeps state on the heap), the mini-batch options of nexmark-flink's config.yaml
(table.exec.mini-batch.*: enabled, 2 s, 50000; table.optimizer.distinct-agg.split.enabled), no
checkpointing, session time zone UTC.

--verify (for small event sets) runs each query once with the INSERT's SELECT collected back instead of
the blackhole sink, and adds to the query's entry "check": {"rows": final row count, "changelog":
{"+I": .., "-U": .., "+U": .., "-D": ..}, "sample": [first rows]}; its timings are not benchmark figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
QUERY_DIR = HERE / "flink_queries"
DEFAULT_FLINK_PYTHON = REPO / "bench" / ".flink-venv" / "bin" / "python"
MARK = "@@nexmark-flink@@ "  # prefix of the worker's protocol lines on its stdout
PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")
FLINK_CONF = {
    "table.local-time-zone": "UTC",
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "2 s",
    "table.exec.mini-batch.size": "50000",
    "table.optimizer.distinct-agg.split.enabled": "true",
}
UNSUPPORTED_HINTS = ("not supported", "unsupported", "doesn't support", "does not support", "cannot be translated",
                     "can not be translated")


def log(msg: str) -> None:
    print(f"[flink] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- /proc


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return kids


def tree_pids(root: int) -> list[int]:
    """root and all its descendants (from /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(_children(pid))
    return out


def tree_cpu_seconds(root: int) -> float:
    """user + system CPU seconds of the live processes of the tree (all their threads)."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLK_TCK


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except OSError:
            continue
    return total


def tree_hwm_bytes(root: int) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


# ------------------------------------------------------------------------------------------------ SQL


def split_sql(text: str) -> list[str]:
    """Statements of a SQL script: '--' comments dropped, split on ';' outside quotes."""
    stmts, cur, i, quote = [], [], 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'`\"":
            quote = ch
            cur.append(ch)
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            continue
        elif ch == ";":
            stmts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    stmts.append("".join(cur).strip())
    return [s for s in stmts if s]


def query_statements(query: str, events_dir: Path) -> list[str]:
    ddl = (QUERY_DIR / "ddl.sql").read_text().replace("${EVENTS_DIR}", str(events_dir))
    return split_sql(ddl) + split_sql((QUERY_DIR / f"{query}.sql").read_text())


def available_queries() -> list[str]:
    qs = [p.stem for p in QUERY_DIR.glob("q*.sql")]
    return sorted(qs, key=lambda q: int(re.sub(r"\D", "", q) or 0))


# --------------------------------------------------------------------------------- worker (Flink venv)


def _emit(**kw: Any) -> None:
    sys.stdout.write(MARK + json.dumps(kw) + "\n")
    sys.stdout.flush()


def _java_reason(exc: BaseException) -> str:
    """A one-line reason: the root cause of a Java exception if there is one, else the first line."""
    jexc = getattr(exc, "java_exception", None)
    if jexc is not None:
        try:
            while jexc.getCause() is not None and jexc.getCause() != jexc:
                jexc = jexc.getCause()
            return str(jexc.toString()).strip()[:1000]
        except Exception:  # best effort only
            pass
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:1000]


def worker(spec: dict[str, Any]) -> int:
    from importlib.metadata import version

    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    stage = "startup"
    try:
        conf = Configuration()
        settings = {**FLINK_CONF, "parallelism.default": str(spec["parallelism"]),
                    "state.backend.type": spec["state_backend"], "pipeline.name": f"nexmark-{spec['query']}"}
        for k, v in settings.items():
            conf.set_string(k, v)
        env = TableEnvironment.create(
            EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build())
        _emit(event="ready", t=time.time(), version=version("apache-flink"))

        stage = "ddl"
        *setup, last = spec["statements"]
        for stmt in setup:
            env.execute_sql(stmt)

        stage = "plan"
        me = os.getpid()
        if spec["verify"]:
            m = re.match(r"(?is)^\s*INSERT\s+INTO\s+\S+\s+(.*)$", last)
            if not m:
                raise ValueError("the query's last statement is not INSERT INTO <sink> <query>")
            _emit(event="submit")
            cpu0, t0 = tree_cpu_seconds(me), time.perf_counter()
            result = env.execute_sql(m.group(1))
            stage = "run"
            counts = {"+I": 0, "-U": 0, "+U": 0, "-D": 0}
            sample: list[str] = []
            it = result._j_table_result.collect()  # Java rows: no Python conversion of TIMESTAMP_LTZ
            try:
                while it.hasNext():
                    row = it.next()
                    kind = str(row.getKind().shortString())
                    counts[kind] = counts.get(kind, 0) + 1
                    if len(sample) < spec["sample"]:
                        sample.append(str(row.toString()))
            finally:
                it.close()
            t1, cpu1 = time.perf_counter(), tree_cpu_seconds(me)
            rows = counts["+I"] + counts["+U"] - counts["-U"] - counts["-D"]
            net = None
            check: dict[str, Any] | None = {"rows": rows, "changelog": counts, "sample": sample}
        else:
            _emit(event="submit")
            cpu0, t0 = tree_cpu_seconds(me), time.perf_counter()
            result = env.execute_sql(last)
            stage = "run"
            job = result.get_job_client()
            job_result = job.get_job_execution_result().result() if job is not None else None
            t1, cpu1 = time.perf_counter(), tree_cpu_seconds(me)
            net = job_result.get_net_runtime() / 1000 if job_result is not None else None
            check = None
        _emit(event="done", seconds=t1 - t0, cpu_seconds=cpu1 - cpu0, net_seconds=net, check=check)
    except Exception as exc:  # reported to the runner, which records it
        import traceback

        traceback.print_exc(file=sys.stderr)
        _emit(event="error", stage=stage, reason=_java_reason(exc))
        sys.stderr.flush()
        os._exit(1)
    # let the runner take its last /proc sample while the JVM is still alive, then leave without the
    # slow orderly gateway shutdown (the JVM exits when its stdin, our pipe, closes)
    sys.stdin.readline()
    sys.stderr.flush()
    os._exit(0)


# ------------------------------------------------------------------------------------- runner (.venv)


class Sampler(threading.Thread):
    """Peak of the tree's summed VmRSS, sampled every `interval` s (the pids are re-listed every 0.5 s:
    walking the tree reads a file per JVM thread)."""

    def __init__(self, root: int, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.peak = root, interval, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        pids, listed = [self.root], 0.0
        while not self.stopped.is_set():
            now = time.monotonic()
            if now - listed >= 0.5:
                pids, listed = tree_pids(self.root), now
            self.peak = max(self.peak, rss_bytes(pids))
            self.stopped.wait(self.interval)


def run_once(args: argparse.Namespace, query: str, events_dir: Path, run_dir: Path) -> dict[str, Any]:
    """One fresh worker for one query: {"ok": bool, ...measurements or stage/reason}. Logs in run_dir."""
    spec = {
        "query": query,
        "statements": query_statements(query, events_dir),
        "parallelism": args.parallelism,
        "state_backend": args.state_backend,
        "verify": args.verify,
        "sample": args.sample,
    }
    env = dict(os.environ)
    env["JVM_ARGS"] = f"-Xmx{args.heap}"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)
    env["FLINK_LOG_DIR"] = str(run_dir)  # Flink's own log (flink-*-python-*.log)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "worker.log", "w") as logf:
        t_spawn = time.time()
        proc = subprocess.Popen(
            [str(args.flink_python), str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf, text=True, env=env,
            start_new_session=True,  # its own process group, so a timeout can end the JVM too
        )
        sampler = Sampler(proc.pid)
        sampler.start()
        timer = threading.Timer(args.timeout, lambda: _kill_group(proc))
        timer.start()
        out: dict[str, Any] = {"ok": False, "stage": "startup", "reason": None}
        startup = None
        try:
            assert proc.stdout is not None and proc.stdin is not None
            for line in proc.stdout:
                if not line.startswith(MARK):
                    logf.write(line)
                    continue
                msg = json.loads(line[len(MARK):])
                if msg["event"] == "ready":
                    startup = msg["t"] - t_spawn
                    out.update(version=msg["version"], stage="ddl")
                elif msg["event"] == "submit":
                    out["stage"] = "run"
                elif msg["event"] == "done":
                    peak = max(sampler.peak, rss_bytes(tree_pids(proc.pid)), tree_hwm_bytes(proc.pid))
                    proc.stdin.write("\n")
                    proc.stdin.flush()
                    seconds = msg["seconds"]
                    out.update(ok=True, stage=None, run={
                        "seconds": round(seconds, 4),
                        "events_per_s": round(args.n_events / seconds, 1) if seconds > 0 else None,
                        "cpu_seconds": round(msg["cpu_seconds"], 3),
                        "cores_used": round(msg["cpu_seconds"] / seconds, 3) if seconds > 0 else None,
                        "peak_rss_mib": round(peak / 2**20, 1),
                        "startup_seconds": round(startup, 3) if startup is not None else None,
                    }, net_seconds=msg.get("net_seconds"), check=msg.get("check"))
                elif msg["event"] == "error":
                    out.update(stage=msg["stage"], reason=msg["reason"])
            proc.wait()
        finally:
            timer.cancel()
            sampler.stopped.set()
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
        if not out["ok"] and out["reason"] is None:
            out["reason"] = (f"timed out after {args.timeout:g} s" if proc.returncode == -signal.SIGKILL
                             else f"worker exited with code {proc.returncode}")
    return out


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the worker we started (JVM included)
    except ProcessLookupError:
        pass


def machine_info() -> dict[str, Any]:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    try:
        jv = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
        java = (jv.stderr or jv.stdout).splitlines()[0].strip()
    except (OSError, IndexError, subprocess.SubprocessError):
        java = "unknown"
    return {"cores": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1), "java": java}


def flink_version(python: Path) -> str:
    r = subprocess.run([str(python), "-c", "from importlib.metadata import version; print(version('apache-flink'))"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"apache-flink is not importable with {python}: {r.stderr.strip()[-500:]}")
    return r.stdout.strip()


def summarize(eps: list[float]) -> dict[str, float | None]:
    if not eps:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(eps), 1), "min": round(min(eps), 1), "max": round(max(eps), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Nexmark on Apache Flink SQL (PyFlink local MiniCluster).")
    ap.add_argument("--events", type=Path, help="event directory (person/auction/bid.jsonl, meta.json)")
    ap.add_argument("--queries", default="all", help="comma-separated, e.g. q0,q1,q5 (default: all in flink_queries/)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--out", type=Path, help="result JSON file")
    ap.add_argument("--heap", default="1536m", help="JVM heap of the Flink JVM (-Xmx; default 1536m)")
    ap.add_argument("--state-backend", choices=("rocksdb", "hashmap"), default="rocksdb")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    ap.add_argument("--flink-python", type=Path, default=Path(os.environ.get("FLINK_PYTHON", DEFAULT_FLINK_PYTHON)),
                    help="Python of the Flink venv (default bench/.flink-venv/bin/python; bench/flink/setup.sh)")
    ap.add_argument("--verify", action="store_true",
                    help="collect each query's rows instead of the blackhole sink (1 run; small event sets)")
    ap.add_argument("--sample", type=int, default=5, help="rows kept per query with --verify")
    ap.add_argument("--log-dir", type=Path, help="worker logs (default: a temporary directory, kept on failure)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker is not None:
        return worker(json.loads(args.worker))
    if args.events is None or args.out is None:
        ap.error("--events and --out are required")
    if not args.flink_python.exists():
        raise SystemExit(f"{args.flink_python} not found: install Flink with `bash bench/flink/setup.sh`")
    events_dir = args.events.resolve()
    meta = json.loads((events_dir / "meta.json").read_text())
    args.n_events = int(meta["events"])
    queries = available_queries() if args.queries == "all" else [q.strip() for q in args.queries.split(",") if q.strip()]
    runs = 1 if args.verify else args.runs
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="nexmark-flink-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    result: dict[str, Any] = {
        "system": "flink",
        "version": flink_version(args.flink_python),
        "machine": machine_info(),
        "events": args.n_events,
        "queries": {},
    }
    log(f"apache-flink {result['version']}, {result['machine']['java']}, {args.n_events:,} events from "
        f"{events_dir}, parallelism {args.parallelism}, heap {args.heap}, state {args.state_backend}, "
        f"{runs} run(s) per query{' (verify)' if args.verify else ''}; logs in {log_dir}")
    failures = 0
    for q in queries:
        entry: dict[str, Any] = {"status": "ok", "reason": None, "runs": [], "events_per_s": summarize([])}
        result["queries"][q] = entry
        if not (QUERY_DIR / f"{q}.sql").exists():
            entry.update(status="unsupported", reason=f"no Flink SQL for {q} in bench/nexmark/flink_queries/")
            log(f"{q}: unsupported ({entry['reason']})")
            continue
        for i in range(1, runs + 1):
            run_dir = log_dir / f"{q}-run{i}"
            r = run_once(args, q, events_dir, run_dir)
            if not r["ok"]:
                reason = f"{r['stage']}: {r['reason']}"
                planning = r["stage"] in ("ddl", "plan")
                unsupported = planning and any(h in str(r["reason"]).lower() for h in UNSUPPORTED_HINTS)
                entry.update(status="unsupported" if unsupported else "failed", reason=reason)
                failures += 1
                log(f"{q} run {i}/{runs}: {entry['status'].upper()} -- {reason} (logs: {run_dir})")
                break
            run = r["run"]
            entry["runs"].append(run)
            if r.get("check") is not None:
                entry["check"] = r["check"]
            net = f", net job {r['net_seconds']:.2f} s" if r.get("net_seconds") is not None else ""
            rows = f", {r['check']['rows']:,} rows {r['check']['changelog']}" if r.get("check") else ""
            log(f"{q} run {i}/{runs}: {run['seconds']:.2f} s (startup {run['startup_seconds']:.1f} s{net}), "
                f"{run['events_per_s']:,.0f} events/s, cpu {run['cpu_seconds']:.1f} s "
                f"({run['cores_used']:.2f} cores), peak RSS {run['peak_rss_mib']:.0f} MiB{rows}")
        entry["events_per_s"] = summarize([r["events_per_s"] for r in entry["runs"] if r["events_per_s"]])

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log(f"wrote {args.out}")
    if not args.log_dir and failures == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
