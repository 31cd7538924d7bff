"""StreamDB's benchmarks in one go, with a summary against the issue's targets.

    .venv/bin/python bench/run.py [--quick] [--only PHASES] [--skip PHASES] [--budget SECONDS]
        [--queries q0,q1,...] [--no-docs]
    (make bench / make bench-quick)

Phases, in order (each a subprocess; its output goes to bench/results/tmp/logs/<phase>.log and a
progress line on stderr shows the phase, its elapsed time against an estimate, and its last line):

  generate          Nexmark events (bench/nexmark/generator.py): 1,000,000 (quick 100,000) into
                    bench/results/tmp/nexmark-<N>/, reused when its meta.json says N events
  nexmark_streamdb  bench/nexmark/run_streamdb.py --mode throughput: q0 q1 q2 q3 q4 q5 q7 q8 q12
                    q14 q17 q22 (quick: q0 q1 q2), 3 runs (quick 1); each query on a fresh server
  flink_setup       bash bench/flink/setup.sh (a separate venv; a no-op once installed)
  nexmark_flink     bench/nexmark/run_flink.py on the same files and queries, parallelism 2 (a
                    fresh JVM and MiniCluster per query and run)
  freshness         bench/views_scale.py --scenario fast --insert copy at 10,000 events/s: one
                    linear view (full: and one aggregate view), 3 runs of 20 s (quick 1 of 8 s)
  pg_compare        bench/pg_compare.py [--quick]: point SELECT q/s and ingest rows/s vs PostgreSQL
  growth            how cost grows: bench/views_scale.py --scenario many --insert copy at 1,000
                    events/s with 1, 10, 100 views (quick 1, 10), and --scenario fast (one linear
                    view) at 1,000 and 5,000 events/s (quick 1,000), the 10,000 point being the
                    freshness phase's; 2 runs of 20 s (quick 1 of 6 s). Server CPU (StreamDB and
                    its Spark JVM, the benchmark's own client excluded) is sampled from /proc over
                    each measured window: cores used and CPU ms per 1,000 events.

A phase whose script is missing, fails or times out is recorded as failed with its error and the
others go on (Nexmark phases need the events; Flink needs its setup). --quick aims at under 5
minutes on 2 cores (--budget, default 285 s, the first Flink setup's download not counted): a
phase that no longer fits is skipped and reported so. The machine (cores, memory, OS, Python,
Java, Spark, Flink, PostgreSQL) is recorded. Results: bench/results/summary.json, then
bench/report.py writes bench/results/summary.md, the PNG plots and the "Latest results" section
of docs/benchmarks.md (regenerate them from the JSON with `python bench/report.py`).
bench/results/views_scale.json, which views_scale.py rewrites, is restored afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import report  # noqa: E402
from pgserver import postgres_version  # noqa: E402

ROOT = BENCH.parent
RESULTS = BENCH / "results"
TMP = RESULTS / "tmp"
LOGS = TMP / "logs"
PY = sys.executable
ALL_QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q12", "q14", "q17", "q22"]
QUICK_QUERIES = ["q0", "q1", "q2"]
PHASES = ["generate", "nexmark_streamdb", "flink_setup", "nexmark_flink", "freshness", "pg_compare", "growth"]
FRESHNESS_RATE = 10_000
GROWTH_VIEWS_RATE = 1_000


@dataclass
class Plan:
    quick: bool
    events: int
    queries: list[str]
    nexmark_runs: int
    fresh_runs: int
    fresh_seconds: float
    fresh_warmup: float
    fresh_variants: list[str]
    growth_views: list[int]
    growth_rates: list[int]  # besides FRESHNESS_RATE, which the freshness phase gives
    growth_runs: int
    growth_seconds: float
    growth_warmup: float
    estimates: dict[str, float]  # seconds, for the progress bar and the quick budget
    caps: dict[str, float]  # timeout per phase (growth: per point)
    left_out: list[str] = field(default_factory=list)


def make_plan(quick: bool) -> Plan:
    if not quick:
        return Plan(quick, 1_000_000, ALL_QUERIES, 3, 3, 20, 5, ["linear", "aggregate"], [1, 10, 100],
                    [1_000, 5_000], 2, 20, 5,
                    estimates={"generate": 120, "nexmark_streamdb": 1500, "flink_setup": 10, "nexmark_flink": 1200,
                               "freshness": 300, "pg_compare": 240, "growth": 150},
                    caps={"generate": 1200, "nexmark_streamdb": 5400, "flink_setup": 1800, "nexmark_flink": 5400,
                          "freshness": 1800, "pg_compare": 1800, "growth": 1200})
    left = [
        "Nexmark: 100,000 events (full: 1,000,000), queries " + ", ".join(QUICK_QUERIES) + " only (full also "
        + ", ".join(q for q in ALL_QUERIES if q not in QUICK_QUERIES) + "), 1 run (full: 3)",
        "freshness: 1 run of 8 s (full: 3 of 20 s); the aggregate view left out",
        "point SELECT / ingest: 1 and 8 clients (full: 1, 4, 8), 2 runs of 1 s (full: 3 of 3 s), "
        "10,000 rows (full: 100,000)",
        "growth: 1 and 10 views (full: 1, 10, 100); 1,000 and 10,000 events/s (full: also 5,000); "
        "1 run of 6 s per point (full: 2 of 20 s)",
    ]
    return Plan(quick, 100_000, QUICK_QUERIES, 1, 1, 8, 3, ["linear"], [1, 10], [1_000], 1, 6, 2,
                estimates={"generate": 15, "nexmark_streamdb": 75, "flink_setup": 5, "nexmark_flink": 60,
                           "freshness": 35, "pg_compare": 70, "growth": 30},
                caps={"generate": 60, "nexmark_streamdb": 120, "flink_setup": 1800, "nexmark_flink": 120,
                      "freshness": 90, "pg_compare": 120, "growth": 80},
                left_out=left)


# ---- progress ---------------------------------------------------------------------------------


class Progress:
    """One line on stderr per phase: [i/n] name [#####.....] elapsed/~estimate  last output line.
    Redrawn in place on a terminal; otherwise a line at start, every 30 s and at the end."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.tty = sys.stderr.isatty()
        self.idx, self.name, self.estimate, self.began = 0, "", 1.0, time.monotonic()
        self.last = ""
        self.printed = 0.0

    def start(self, idx: int, name: str, estimate: float) -> None:
        self.idx, self.name, self.estimate = idx, name, max(estimate, 1.0)
        self.began = self.printed = time.monotonic()
        self.last = ""
        if not self.tty:
            self._emit(self._line(), end="\n")
        self.tick()

    def note(self, line: str) -> None:
        line = line.strip()
        if line:
            self.last = line

    def _line(self) -> str:
        elapsed = time.monotonic() - self.began
        frac = min(elapsed / self.estimate, 0.99)
        bar = "#" * int(frac * 20) + "." * (20 - int(frac * 20))
        return f"[{self.idx}/{self.total}] {self.name:16s} [{bar}] {elapsed:5.0f}s/~{self.estimate:.0f}s  {self.last}"

    def _emit(self, text: str, end: str) -> None:
        if self.tty:
            width = shutil.get_terminal_size((120, 20)).columns
            sys.stderr.write("\r\x1b[K" + text[: width - 1] + end)
        else:
            sys.stderr.write(text[:200] + end)
        sys.stderr.flush()

    def tick(self) -> None:
        if self.tty:
            self._emit(self._line(), end="")
        elif time.monotonic() - self.printed >= 30:
            self.printed = time.monotonic()
            self._emit(self._line(), end="\n")

    def done(self, status: str, seconds: float, detail: str = "") -> None:
        text = f"[{self.idx}/{self.total}] {self.name:16s} {status:8s} {seconds:6.0f}s  {detail}"
        self._emit(text, end="\n")

    def info(self, text: str) -> None:
        self._emit(text, end="\n")


# ---- processes --------------------------------------------------------------------------------


CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds so far) of every process (Linux /proc)."""
    table: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2:].split()
        try:
            table[int(entry)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / CLK_TCK)
        except (IndexError, ValueError):
            continue
    return table


class CpuSampler(threading.Thread):
    """CPU seconds used by the descendants of `root` (not root itself), every `every` s: the sum
    over every process seen of its last reading, so it never goes down when one exits."""

    def __init__(self, root: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.every = root, every
        self.stop = threading.Event()
        self.samples: list[tuple[float, float]] = []
        self.seen: dict[int, float] = {}

    def run(self) -> None:
        if not os.path.isdir("/proc"):
            return
        while not self.stop.is_set():
            t = time.monotonic()
            table = _proc_table()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in table.items():
                children.setdefault(ppid, []).append(pid)
            todo = list(children.get(self.root, []))
            while todo:
                pid = todo.pop()
                self.seen[pid] = max(self.seen.get(pid, 0.0), table[pid][1])
                todo += children.get(pid, [])
            self.samples.append((t, sum(self.seen.values())))
            self.stop.wait(self.every)

    def cpu_between(self, t0: float, t1: float) -> float | None:
        def at(t: float) -> float | None:
            s = self.samples
            if not s or t < s[0][0] or t > s[-1][0]:
                return None
            for (ta, ca), (tb, cb) in zip(s, s[1:], strict=False):
                if ta <= t <= tb:
                    return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
            return s[-1][1]

        a, b = at(t0), at(t1)
        return b - a if a is not None and b is not None else None


@dataclass
class Outcome:
    status: str  # ok, failed, skipped
    seconds: float = 0.0
    error: str | None = None
    rc: int | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    sampler: CpuSampler | None = None
    log: str | None = None

    def record(self, cmd: list[str] | None = None) -> dict[str, Any]:
        return {"status": self.status, "seconds": round(self.seconds, 1), "error": self.error, "rc": self.rc,
                "log": self.log,
                "cmd": " ".join(c.replace(f"{ROOT}/", "") for c in cmd) if cmd else None}


def run_cmd(cmd: list[str], log_name: str, timeout: float, progress: Progress,
            sample_cpu: bool = False, budget_cut: bool = False) -> Outcome:
    """Runs cmd in its own process group (killed whole on timeout), its output to a log file.
    budget_cut: the timeout is what is left of the quick budget (said so if it strikes)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{log_name}.log"
    began = time.monotonic()
    out = Outcome("failed", log=str(log_path.relative_to(ROOT)))
    with log_path.open("w") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        try:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True,
                                    errors="replace", env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as e:
            out.error = f"could not start {cmd[0]}: {e}"
            return out
        sampler = CpuSampler(proc.pid) if sample_cpu else None
        if sampler:
            sampler.start()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                log.flush()
                out.lines.append((time.monotonic(), line.rstrip("\n")))
                progress.note(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        timed_out = False
        try:
            while proc.poll() is None:
                if time.monotonic() - began > timeout:
                    timed_out = True
                    _kill_group(proc)
                    break
                progress.tick()
                time.sleep(0.25)
        except BaseException:  # Ctrl-C or SIGTERM: the phase's own session would outlive us
            _kill_group(proc)
            raise
        proc.wait()
        reader.join(10)
        if sampler:
            sampler.stop.set()
            sampler.join(5)
        out.sampler = sampler
        out.rc = proc.returncode
        out.seconds = time.monotonic() - began
        if timed_out:
            out.error = f"timed out after {timeout:.0f} s (killed)" + (" at the end of the quick budget" if budget_cut
                                                                       else "")
        elif proc.returncode != 0:
            tail = [ln for _, ln in out.lines if ln.strip()][-12:]
            out.error = f"exit code {proc.returncode}: " + " | ".join(tail)[-1500:]
        else:
            out.status = "ok"
        if timed_out:
            log.write(f"\n[run.py] {out.error}\n")
    return out


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the phase's process group (its servers and JVMs included), SIGKILL after 20 s."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---- machine ----------------------------------------------------------------------------------


def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip()
    return text.splitlines()[0] if text else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    os_name = None
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(), "cpu": cpu_model, "memory_gib": mem_gib,
        "os": os_name or platform.platform(), "kernel": platform.release(), "platform": platform.platform(),
        "python": platform.python_version(), "java": _first_line(["java", "-version"]),
        "spark": _version("pyspark"), "streamdb": _version("streamdb"), "psycopg": _version("psycopg"),
        "postgresql": postgres_version(), "flink": _flink_version(),
        "spark_master": "local[2]", "loadavg_at_start": os.getloadavg(),
    }


def _flink_version() -> str | None:
    py = BENCH / ".flink-venv" / "bin" / "python"
    if not py.exists():
        return None
    return _first_line([str(py), "-c", "from importlib.metadata import version; print(version('apache-flink'))"])


# ---- phases -----------------------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None
    except (OSError, json.JSONDecodeError):
        return None


class Harness:
    def __init__(self, plan: Plan, args: argparse.Namespace) -> None:
        self.plan, self.args = plan, args
        self.phases = [p for p in PHASES if p in args.only and p not in args.skip]
        self.progress = Progress(len(self.phases))
        self.began = time.monotonic()
        self.uncounted = 0.0  # Flink's first setup (a download) is not counted to the quick budget
        self.summary: dict[str, Any] = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": plan.quick,
            "plan": {"events": plan.events, "queries": plan.queries, "nexmark_runs": plan.nexmark_runs,
                     "freshness": {"rate": FRESHNESS_RATE, "runs": plan.fresh_runs, "seconds": plan.fresh_seconds,
                                   "variants": plan.fresh_variants},
                     "growth": {"views": plan.growth_views, "views_rate": GROWTH_VIEWS_RATE,
                                "rates": sorted({*plan.growth_rates, FRESHNESS_RATE}), "runs": plan.growth_runs,
                                "seconds": plan.growth_seconds},
                     "budget_s": args.budget if plan.quick else None},
            "left_out": plan.left_out, "phases": {}, "nexmark": {"events": plan.events, "streamdb": None,
                                                                  "flink": None},
            "freshness": None, "pg_compare": None, "growth": {"views": [], "rate": []},
        }
        self.events_dir = TMP / f"nexmark-{plan.events}"
        self.views_scale_json = RESULTS / "views_scale.json"

    # -- budget

    def remaining(self) -> float:
        if not self.plan.quick:
            return float("inf")
        return self.args.budget - (time.monotonic() - self.began - self.uncounted)

    def timeout_for(self, phase: str) -> tuple[float, bool]:
        """(timeout, whether it is the rest of the quick budget rather than the phase's cap)"""
        rest = self.remaining()
        return (rest, True) if rest < self.plan.caps[phase] else (self.plan.caps[phase], False)

    def fits(self, phase: str, share: float = 0.5) -> bool:
        # A phase needs at least this share of its estimate to be worth starting.
        return self.remaining() >= share * self.plan.estimates[phase]

    def budget_note(self) -> str:
        return f"quick budget: {max(0.0, self.remaining()):.0f} s left"

    # -- running

    def run(self) -> dict[str, Any]:
        self.progress.info(f"StreamDB benchmarks ({'quick' if self.plan.quick else 'full'}): "
                           + ", ".join(self.phases))
        self.summary["machine"] = machine_info()
        saved = self.views_scale_json.read_bytes() if self.views_scale_json.exists() else None
        try:
            for i, phase in enumerate(self.phases, 1):
                self.progress.start(i, phase, self.plan.estimates[phase] * (len(self.growth_points())
                                                                             if phase == "growth" else 1))
                began = time.monotonic()
                try:
                    record = getattr(self, f"phase_{phase}")()
                except Exception as e:  # the harness's own bug in one phase must not end the others
                    record = {"status": "failed", "error": f"run.py: {type(e).__name__}: {e}"}
                record.setdefault("seconds", round(time.monotonic() - began, 1))
                self.summary["phases"][phase] = record
                self.progress.done(record["status"], time.monotonic() - began, (record.get("error") or "")[:150])
        finally:
            if saved is not None:
                self.views_scale_json.write_bytes(saved)
            elif self.views_scale_json.exists() and any(p in self.phases for p in ("freshness", "growth")):
                self.views_scale_json.unlink()
        self.summary["duration_s"] = round(time.monotonic() - self.began, 1)
        self.summary["machine"]["loadavg_at_end"] = os.getloadavg()
        if self.summary["machine"].get("flink") is None:
            fl = self.summary["nexmark"].get("flink") or {}
            self.summary["machine"]["flink"] = fl.get("version") or _flink_version()
        return self.summary

    def skipped(self, why: str) -> dict[str, Any]:
        return {"status": "skipped", "error": why, "seconds": 0.0}

    def script_phase(self, phase: str, script: Path, cmd: list[str], sample_cpu: bool = False) -> tuple[
            dict[str, Any], Outcome | None]:
        if not script.exists():
            return {"status": "failed", "error": f"{script.relative_to(ROOT)} not found"}, None
        if not self.fits(phase):
            return self.skipped(self.budget_note()), None
        timeout, cut = self.timeout_for(phase)
        out = run_cmd(cmd, phase, timeout, self.progress, sample_cpu, cut)
        return out.record(cmd), out

    def phase_generate(self) -> dict[str, Any]:
        meta = read_json(self.events_dir / "meta.json")
        if meta and meta.get("events") == self.plan.events and all(
                (self.events_dir / f"{k}.jsonl").exists() for k in ("person", "auction", "bid")):
            return {"status": "ok", "error": None,
                    "note": f"reused {self.events_dir.relative_to(ROOT)} (same event count)"}
        script = BENCH / "nexmark" / "generator.py"
        record, _ = self.script_phase("generate", script, [PY, str(script), "--events", str(self.plan.events),
                                                           "--out", str(self.events_dir), "--seed", "1"])
        return record

    def _events_ready(self) -> str | None:
        gen = self.summary["phases"].get("generate")
        if gen is not None and gen["status"] != "ok":
            return f"no events: generate {gen['status']}"
        if not (self.events_dir / "meta.json").exists():
            return f"no events in {self.events_dir.relative_to(ROOT)} (run the generate phase)"
        return None

    def _nexmark(self, phase: str, system: str, script: Path, extra: list[str]) -> dict[str, Any]:
        missing = self._events_ready()
        if missing:
            return {"status": "failed", "error": missing}
        out_json = RESULTS / f"nexmark_{system}.json"
        out_json.unlink(missing_ok=True)
        cmd = [PY, str(script), "--events", str(self.events_dir), "--queries", ",".join(self.plan.queries),
               "--runs", str(self.plan.nexmark_runs), *extra, "--out", str(out_json)]
        record, _ = self.script_phase(phase, script, cmd)
        data = read_json(out_json)
        if data is not None:
            self.summary["nexmark"][system] = data
            bad = [f"{q}: {v.get('status')}" for q, v in (data.get("queries") or {}).items()
                   if isinstance(v, dict) and v.get("status") != "ok"]
            if bad:
                record["queries_not_ok"] = bad
        elif record["status"] == "ok":
            record.update(status="failed", error=f"no results in {out_json.relative_to(ROOT)}")
        return record

    def phase_nexmark_streamdb(self) -> dict[str, Any]:
        return self._nexmark("nexmark_streamdb", "streamdb", BENCH / "nexmark" / "run_streamdb.py",
                             ["--mode", "throughput"])

    def phase_flink_setup(self) -> dict[str, Any]:
        script = BENCH / "flink" / "setup.sh"
        if not script.exists():
            return {"status": "failed", "error": f"{script.relative_to(ROOT)} not found"}
        began = time.monotonic()
        cmd = ["bash", str(script)]
        out = run_cmd(cmd, "flink_setup", self.plan.caps["flink_setup"], self.progress)
        self.uncounted += time.monotonic() - began
        return out.record(cmd)

    def phase_nexmark_flink(self) -> dict[str, Any]:
        setup = self.summary["phases"].get("flink_setup")
        if setup is not None and setup["status"] != "ok":
            return {"status": "failed", "error": f"Flink setup {setup['status']}: {setup.get('error')}"}
        return self._nexmark("nexmark_flink", "flink", BENCH / "nexmark" / "run_flink.py", ["--parallelism", "2"])

    # -- views_scale.py points (freshness, growth)

    def views_scale_point(self, phase: str, log_name: str, scenario: str, key: str, views: int, rate: int,
                          runs: int, seconds: float, warmup: float, variants: str = "linear") -> dict[str, Any]:
        script = BENCH / "views_scale.py"
        cmd = [PY, str(script), "--scenario", scenario, "--insert", "copy", "--views", str(views),
               "--rate", str(rate), "--runs", str(runs), "--seconds", str(seconds), "--warmup", str(warmup),
               "--lag-every", "0" if self.plan.quick else "5"]
        if scenario == "fast":
            cmd += ["--variants", variants]
        point: dict[str, Any] = {"views": views, "rate": rate, "scenario": scenario, "runs": runs,
                                 "window_s": seconds}
        if not script.exists():
            return {**point, "status": "failed", "error": "bench/views_scale.py not found"}
        timeout, cut = self.timeout_for(phase)
        out = run_cmd(cmd, log_name, timeout, self.progress, sample_cpu=True, budget_cut=cut)
        point.update(out.record(cmd))
        data = read_json(self.views_scale_json) or {}
        scenarios = data.get("scenarios", {})
        keys = [f"{key}_{v}_copy" for v in variants.split(",")] if scenario == "fast" else [f"{key}_copy"]
        point["figures"] = {}
        for k in keys:
            sc = scenarios.get(k)
            if not sc or out.status != "ok":
                continue
            point["figures"][k.removeprefix("fast_").removesuffix("_copy")] = _scenario_figures(
                sc, out, warmup, seconds)
        if out.status == "ok" and not point["figures"]:
            point.update(status="failed", error=f"no scenario {keys} in {self.views_scale_json.relative_to(ROOT)}")
        elif out.status == "ok" and all(f["p99_ms"] is None for f in point["figures"].values()):
            errors = [e for f in point["figures"].values() for e in f["run_errors"]]
            point.update(status="failed", error="no freshness figure" + (f": {errors[0][:500]}" if errors else ""))
        return point

    def phase_freshness(self) -> dict[str, Any]:
        if not self.fits("freshness"):
            return self.skipped(self.budget_note())
        p = self.plan
        point = self.views_scale_point("freshness", "freshness", "fast", "fast", 1, FRESHNESS_RATE, p.fresh_runs,
                                       p.fresh_seconds, p.fresh_warmup, ",".join(p.fresh_variants))
        self.summary["freshness"] = point
        return {k: point.get(k) for k in ("status", "seconds", "error", "rc", "log", "cmd")}

    def phase_pg_compare(self) -> dict[str, Any]:
        script = BENCH / "pg_compare.py"
        out_json = RESULTS / "pg_compare.json"
        cmd = [PY, str(script), "--out", str(out_json)] + (["--quick"] if self.plan.quick else [])
        started = time.time()
        record, _ = self.script_phase("pg_compare", script, cmd)
        data = read_json(out_json)
        fresh = out_json.exists() and out_json.stat().st_mtime >= started
        if data is not None and fresh:
            self.summary["pg_compare"] = data
        elif record["status"] == "ok":
            record.update(status="failed", error="no results in bench/results/pg_compare.json")
        return record

    def growth_points(self) -> list[tuple[str, int, int]]:
        pts = [("views", n, GROWTH_VIEWS_RATE) for n in self.plan.growth_views]
        pts += [("rate", 1, r) for r in self.plan.growth_rates if r != FRESHNESS_RATE]
        return pts

    def phase_growth(self) -> dict[str, Any]:
        p = self.plan
        for old in LOGS.glob("growth_*.log"):  # an earlier run's points
            old.unlink()
        done: list[str] = []
        failed: list[str] = []
        skipped: list[str] = []
        for axis, views, rate in self.growth_points():
            label = f"{views} views" if axis == "views" else f"{rate} events/s"
            if not self.fits("growth", 1.0):  # a point cut short gives nothing: start only if it fits
                skipped.append(label)
                self.summary["growth"][axis].append({"views": views, "rate": rate, "status": "skipped",
                                                     "error": self.budget_note()})
                continue
            self.progress.note(f"growth: {label}")
            if axis == "views":
                point = self.views_scale_point("growth", f"growth_views_{views}", "many", "many", views, rate,
                                               p.growth_runs, p.growth_seconds, p.growth_warmup)
            else:
                point = self.views_scale_point("growth", f"growth_rate_{rate}", "fast", "fast", 1, rate,
                                               p.growth_runs, p.growth_seconds, p.growth_warmup, "linear")
            self.summary["growth"][axis].append(point)
            (done if point["status"] == "ok" else failed).append(label)
            if point["status"] != "ok":
                failed[-1] += f" ({(point.get('error') or '')[:200]})"
        # The freshness phase's point is the 10,000 events/s (and 1 view at 10,000) point of the rate axis.
        fresh = self.summary.get("freshness")
        if fresh and fresh.get("status") == "ok":
            self.summary["growth"]["rate"].append({**fresh, "from": "freshness phase"})
        self.summary["growth"]["rate"].sort(key=lambda x: x.get("rate", 0))
        status = "ok" if done and not failed else ("failed" if failed else "skipped")
        error = "; ".join(x for x in (f"failed: {', '.join(failed)}" if failed else "",
                                      f"skipped (quick budget): {', '.join(skipped)}" if skipped else "") if x)
        return {"status": status, "error": error or None, "points_ok": done,
                "log": str((LOGS / "growth_*.log").relative_to(ROOT))}


def _scenario_figures(sc: dict[str, Any], out: Outcome, warmup: float, seconds: float) -> dict[str, Any]:
    """One views_scale scenario's figures, with the server's CPU over each run's measured window."""
    med = sc.get("median", {})
    runs = sc.get("runs", [])
    fr = med.get("freshness_ms", {})
    probe = "linear" if "linear" in fr else (sorted(fr)[0] if fr else None)
    fig: dict[str, Any] = {
        "probe": probe,
        "p50_ms": fr.get(probe, {}).get("p50") if probe else None,
        "p99_ms": fr.get(probe, {}).get("p99") if probe else None,
        "max_ms": max((r.get("freshness_ms", {}).get(probe, {}).get("max") or 0 for r in runs), default=None)
        if probe else None,
        "by_probe": fr,
        "achieved_rate": med.get("achieved_rate_measured"),
        "poll_ms_p50": med.get("poll_ms_p50"),
        "create_views_s": med.get("create_views_s"),
        "final_flush_s": med.get("final_flush_s"),
        "timeouts": sum(sum((r.get("timeouts") or {}).values()) for r in runs),
        "failed_views": max(((r.get("show_queries") or {}).get("with_error") or 0 for r in runs), default=0),
        "run_errors": [r["error"] for r in runs if r.get("error")],
        "counts_match": all(c.get("match") for r in runs for c in (r.get("consistency") or {}).values()),
    }
    # CPU: each run's window starts `warmup` s after its "views created ... load" line.
    starts = [t for t, ln in out.lines if re.search(r"\] \d+ views created in .* load", ln)]
    cpu, cores, per_k = [], [], []
    rates = [(r.get("writer") or {}).get("achieved_rate_measured") for r in runs]
    for i, t in enumerate(starts):
        used = out.sampler.cpu_between(t + warmup, t + warmup + seconds) if out.sampler else None
        if used is None:
            continue
        cpu.append(used)
        cores.append(used / seconds)
        rate = rates[i] if i < len(rates) else None
        if isinstance(rate, int | float) and rate > 0:
            per_k.append(used / (rate * seconds) * 1000 * 1000)  # ms of CPU per 1,000 events
    fig["server_cores_used"] = statistics.median(cores) if cores else None
    fig["server_cpu_ms_per_1k_events"] = statistics.median(per_k) if per_k else None
    fig["server_cpu_s_per_run"] = cpu
    return fig


def parse_phases(text: str | None) -> list[str]:
    if not text:
        return []
    names = [x.strip() for x in text.split(",") if x.strip()]
    for n in names:
        if n not in PHASES:
            raise SystemExit(f"unknown phase {n!r}; phases: {', '.join(PHASES)}")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="phases: " + ", ".join(PHASES))
    ap.add_argument("--quick", action="store_true", help="the short version (< 5 min on 2 cores)")
    ap.add_argument("--only", help="comma-separated phases to run (default: all)")
    ap.add_argument("--skip", help="comma-separated phases to leave out")
    ap.add_argument("--budget", type=float, default=285, help="quick: seconds for all phases (default 285)")
    ap.add_argument("--queries", help="Nexmark queries instead of the plan's (e.g. q0,q1)")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through run_cmd, which stops the phase
    args.only = parse_phases(args.only) or PHASES
    args.skip = parse_phases(args.skip)
    plan = make_plan(args.quick)
    if args.queries:
        plan.queries = [q.strip() for q in args.queries.split(",") if q.strip()]
        plan.left_out = [x if not x.startswith("Nexmark") else f"Nexmark: {plan.events:,} events, queries "
                         f"{', '.join(plan.queries)} (--queries)" for x in plan.left_out]
    harness = Harness(plan, args)
    summary = harness.run()
    summary["targets"] = report.targets(summary)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    written = report.write_all(summary, RESULTS, None if args.no_docs else ROOT / "docs" / "benchmarks.md")
    print(report.console_summary(summary))
    print("written: " + ", ".join(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
                                  for p in [RESULTS / "summary.json", *written]))
    print(f"took {summary['duration_s']:.0f} s")


if __name__ == "__main__":
    main()
