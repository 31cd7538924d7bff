"""Reports of bench/run.py's results: Markdown tables, PNG plots, the issue's targets.

    .venv/bin/python bench/report.py [--summary bench/results/summary.json] [--no-docs]

Reads bench/results/summary.json (written by bench/run.py) and writes bench/results/summary.md,
the plots under bench/results/ (matplotlib: `pip install -e '.[bench]'`; without it the plots
are left out and the Markdown says so) and the section between <!-- results:start --> and
<!-- results:end --> of docs/benchmarks.md. Run it again after editing this file to regenerate
everything from the same JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
PLOTS = {
    "nexmark_throughput.png": "Nexmark throughput per query, StreamDB vs Flink",
    "freshness_vs_views.png": "freshness and server CPU as views grow",
    "freshness_vs_rate.png": "freshness and server CPU as the event rate grows",
    "point_select.png": "point SELECT queries/s vs concurrent clients, StreamDB vs PostgreSQL",
}


# ---- formatting -------------------------------------------------------------------------------


def num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def times(v: Any) -> str:
    return f"{v:.2f}x" if isinstance(v, int | float) else "-"


def spread(f: dict[str, Any] | None) -> str:
    """median [min-max] of a {"median","min","max"} figure."""
    if not f or not isinstance(f.get("median"), int | float):
        return "-"
    if f.get("min") == f.get("max"):
        return num(f["median"])
    return f"{num(f['median'])} [{num(f.get('min'))}-{num(f.get('max'))}]"


def ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


# ---- extracting figures -----------------------------------------------------------------------


def _median(xs: list[Any]) -> float | None:
    vals = [x for x in xs if isinstance(x, int | float)]
    return statistics.median(vals) if vals else None


def _query_figure(data: dict[str, Any] | None, q: str) -> dict[str, Any]:
    entry = ((data or {}).get("queries") or {}).get(q)
    if not isinstance(entry, dict):
        return {"status": "not run", "eps": None}
    eps = entry.get("events_per_s") if isinstance(entry.get("events_per_s"), dict) else None
    runs = entry.get("runs") or []
    cores = _median([r.get("cores_used") for r in runs if isinstance(r, dict)])
    median = eps.get("median") if eps and entry.get("status") == "ok" else None
    return {"status": entry.get("status") or "?", "reason": entry.get("reason"), "eps": median,
            "eps_fig": eps if median is not None else None, "cores": cores, "per_core": ratio(median, cores),
            "rss": _median([r.get("peak_rss_mib") for r in runs if isinstance(r, dict)])}


def _qkey(q: str) -> tuple[int, str]:
    digits = "".join(c for c in q if c.isdigit())
    return (int(digits) if digits else 10**6, q)


def nexmark_rows(s: dict[str, Any]) -> list[dict[str, Any]]:
    nx = s.get("nexmark") or {}
    sdb, fl = nx.get("streamdb"), nx.get("flink")
    queries = set((s.get("plan") or {}).get("queries") or [])
    for d in (sdb, fl):
        queries |= set(((d or {}).get("queries") or {}).keys())
    rows = []
    for q in sorted(queries, key=_qkey):
        a, b = _query_figure(sdb, q), _query_figure(fl, q)
        rows.append({"query": q, "streamdb": a, "flink": b, "ratio": ratio(a["eps"], b["eps"])})
    return rows


def point_rows(s: dict[str, Any]) -> list[dict[str, Any]]:
    pc = s.get("pg_compare") or {}
    rows = []
    for proto, by_n in (pc.get("point_select") or {}).items():
        for n, f in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            rows.append({"protocol": proto, "clients": int(n), **f})
    return rows


def growth_points(s: dict[str, Any], axis: str) -> list[dict[str, Any]]:
    out = []
    for p in (s.get("growth") or {}).get(axis) or []:
        figs = p.get("figures") or {}
        f = figs.get("linear") or figs.get("many") or next(iter(figs.values()), {})
        out.append({"views": p.get("views"), "rate": p.get("rate"), "status": p.get("status"),
                    "error": p.get("error"), "from": p.get("from"), **f})
    return out


# ---- targets ----------------------------------------------------------------------------------


def _nexmark_target(name: str, queries: list[str], threshold: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_q = {r["query"]: r for r in rows}
    measured = {q: by_q[q]["ratio"] for q in queries if q in by_q and by_q[q]["ratio"] is not None}
    missing = [q for q in queries if q not in measured]
    text = ", ".join(f"{q} {times(measured.get(q))}" for q in queries) + " of Flink"
    if any(v < threshold for v in measured.values()):
        status = "not met"
    elif not measured:
        status = "not measured"
    elif missing:
        status = f"met for {', '.join(measured)}; {', '.join(missing)} not measured"
    else:
        status = "met"
    return {"target": name, "measured": text, "status": status}


def targets(s: dict[str, Any]) -> list[dict[str, Any]]:
    rows = nexmark_rows(s)
    out = [_nexmark_target("Nexmark q0, q1, q2: StreamDB throughput >= Flink", ["q0", "q1", "q2"], 1.0, rows),
           _nexmark_target("Nexmark q4, q5, q7: within 2x of Flink (>= 0.5x)", ["q4", "q5", "q7"], 0.5, rows)]

    fresh = s.get("freshness") or {}
    lin = (fresh.get("figures") or {}).get("linear") or {}
    p99, rate = lin.get("p99_ms"), lin.get("achieved_rate")
    if p99 is None:
        st, text = "not measured", f"freshness phase {fresh.get('status', 'not run')}"
    else:
        text = f"p99 {num(p99)} ms (p50 {num(lin.get('p50_ms'))} ms) at {num(rate)} events/s by COPY"
        st = "met" if p99 <= 1000 else "not met"
        if isinstance(rate, int | float) and rate < 0.9 * (fresh.get("rate") or 10_000):
            st += " (rate below 10,000 events/s)"
    out.append({"target": "Freshness p99 <= 1 s at 10,000 events/s, simple (linear) view", "measured": text,
                "status": st})

    pts = [p for p in point_rows(s) if isinstance(p.get("ratio"), int | float)]
    if not pts:
        out.append({"target": "Point SELECT on a view >= 50% of PostgreSQL's queries/s", "measured": "-",
                    "status": "not measured"})
    else:
        lo = min(pts, key=lambda p: p["ratio"])
        hi = max(pts, key=lambda p: p["ratio"])
        def where(p: dict[str, Any]) -> str:
            return f"{p['protocol']}, {p['clients']} client{'s' if p['clients'] != 1 else ''}"

        text = f"{times(lo['ratio'])} ({where(lo)}) to {times(hi['ratio'])} ({where(hi)}) of PostgreSQL"
        out.append({"target": "Point SELECT on a view >= 50% of PostgreSQL's queries/s", "measured": text,
                    "status": "met" if lo["ratio"] >= 0.5 else "not met"})

    copy = ((s.get("pg_compare") or {}).get("ingest") or {}).get("copy") or {}
    r = copy.get("ratio")
    out.append({"target": "COPY ingest >= 50% of PostgreSQL's rows/s",
                "measured": (f"{times(r)}: {num((copy.get('streamdb') or {}).get('median'))} vs "
                             f"{num((copy.get('postgresql') or {}).get('median'))} rows/s") if r is not None else "-",
                "status": "not measured" if r is None else ("met" if r >= 0.5 else "not met")})
    return out


# ---- Markdown ---------------------------------------------------------------------------------


def markdown(s: dict[str, Any], img_prefix: str = "", heading: str = "#", plots: list[str] | None = None,
             plot_note: str | None = None) -> str:
    h2 = heading + "#"
    m = s.get("machine") or {}
    lines = [f"{heading} StreamDB benchmark results", "",
             f"{'Quick' if s.get('quick') else 'Full'} run of `bench/run.py{' --quick' if s.get('quick') else ''}` "
             f"on {s.get('when', '?')}, {num(s.get('duration_s'))} s. Figures from one noisy 2-core machine, "
             "indicative, not assertions.", ""]
    lines += table(["machine", ""], [
        ["cores / memory", f"{m.get('cores', '-')} ({m.get('cpu') or '?'}) / {m.get('memory_gib', '-')} GiB"],
        ["OS", f"{m.get('os', '-')} (kernel {m.get('kernel', '-')})"],
        ["Python / Java", f"{m.get('python', '-')} / {m.get('java') or '-'}"],
        ["Spark (StreamDB's engine) / StreamDB", f"{m.get('spark') or '-'} ({m.get('spark_master', '-')}) / "
                                                 f"{m.get('streamdb') or '-'}"],
        ["Flink / PostgreSQL", f"{m.get('flink') or '-'} / {m.get('postgresql') or '-'}"],
        ["load average at start / end", f"{_load(m.get('loadavg_at_start'))} / {_load(m.get('loadavg_at_end'))}"],
    ])

    lines += ["", f"{h2} Targets", ""]
    lines += table(["target", "measured", "status"],
                   [[t["target"], t["measured"], f"**{t['status']}**"] for t in (s.get("targets") or targets(s))])

    nx = s.get("nexmark") or {}
    lines += ["", f"{h2} Nexmark throughput", "",
              f"{num(nx.get('events'))} events, the same files for both, each query alone; events/s = events / "
              "seconds, median [min-max] of runs. StreamDB (Spark local[2], a fresh server per run): first COPY "
              "of the events -> FLUSH returned (the view reflects them all). Flink (local MiniCluster, "
              "parallelism 2, a fresh JVM per run): INSERT submitted -> bounded job finished (planning and "
              "MiniCluster start included, JVM start not). Per core = events/s / cores used (CPU seconds of "
              "the system's processes / seconds).", ""]
    rows = []
    for r in nexmark_rows(s):
        a, b = r["streamdb"], r["flink"]
        notes = "; ".join(f"{who}: {f['status']}" + (f" ({str(f.get('reason'))[:120]})" if f.get("reason") else "")
                          for who, f in (("StreamDB", a), ("Flink", b)) if f["status"] != "ok")
        rows.append([r["query"], spread(a.get("eps_fig")), spread(b.get("eps_fig")), times(r["ratio"]),
                     num(a.get("per_core")), num(b.get("per_core")), notes])
    lines += table(["query", "StreamDB events/s", "Flink events/s", "StreamDB/Flink", "StreamDB per core",
                    "Flink per core", "notes"], rows) if rows else ["No Nexmark figures (see Phases)."]

    fresh = s.get("freshness") or {}
    lines += ["", f"{h2} Freshness", "",
              "Insert acknowledged -> the marker row visible in the view (polled every 20 ms; the poll included), "
              "`bench/views_scale.py --scenario fast --insert copy`, median of the runs' p50 and p99; "
              "server cores = CPU of StreamDB and its Spark JVM over the measured window / its length.", ""]
    frows = []
    for name, f in (fresh.get("figures") or {}).items():
        frows.append([f"1 {name} view", f"{num(f.get('achieved_rate'))} / {num(fresh.get('rate'))}",
                      num(f.get("p50_ms")), num(f.get("p99_ms")), num(f.get("max_ms")), str(f.get("timeouts", "-")),
                      num(f.get("server_cores_used"))])
    lines += table(["view", "events/s achieved / target", "p50 ms", "p99 ms", "max ms", "timeouts",
                    "server cores"], frows) if frows else [
        f"No freshness figures ({fresh.get('status', 'not run')}"
        + (f": {fresh['error']}" if fresh.get("error") else "") + ")."]

    pc = s.get("pg_compare") or {}
    par = pc.get("parameters") or {}
    lines += ["", f"{h2} Point SELECT: StreamDB view vs PostgreSQL table", "",
              f"`SELECT v FROM kv WHERE id = <random key>` over {num(par.get('rows'))} rows (StreamDB: a "
              "materialized view keyed by id; PostgreSQL: a table with a primary key), concurrent client "
              f"processes with a connection each; median [min-max] of {par.get('runs', '-')} runs of "
              f"{par.get('seconds', '-')} s. simple = literal SQL (simple query protocol), prepared = "
              "prepare=True (Bind/Execute only).", ""]
    prow = [[p["protocol"], str(p["clients"]), spread(p.get("streamdb")), spread(p.get("postgresql")),
             times(p.get("ratio")), num((p.get("streamdb") or {}).get("latency_ms_p50")),
             num((p.get("postgresql") or {}).get("latency_ms_p50"))] for p in point_rows(s)]
    lines += table(["protocol", "clients", "StreamDB q/s", "PostgreSQL q/s", "ratio", "StreamDB p50 ms",
                    "PostgreSQL p50 ms"], prow) if prow else ["No point-select figures (see Phases)."]

    lines += ["", f"{h2} Ingest: StreamDB stream vs PostgreSQL table", "",
              "One client (insert_single_x8: 8 client processes at once, rows/s over the window); rows/s "
              "over the time spent in the statements. insert_single = one-row prepared "
              f"INSERTs; insert_batch = INSERT ... VALUES of {par.get('batch', '-')} rows; copy = COPY FROM "
              f"STDIN of {num(par.get('copy_batch'))} rows per statement. StreamDB's view over the ingested "
              "stream catches up after the acknowledgement (FLUSH time shown). "
              + ("PostgreSQL with its default durability (fsync and synchronous_commit on), as StreamDB "
                 "acknowledges a write once durable." if par.get("postgresql_durable")
                 else "PostgreSQL with fsync and synchronous_commit off."), ""]
    irow = [[k, spread(f.get("streamdb")), spread(f.get("postgresql")), times(f.get("ratio")),
             num((f.get("streamdb_view_catch_up_s") or {}).get("median"))]
            for k, f in (pc.get("ingest") or {}).items()]
    lines += table(["ingest", "StreamDB rows/s", "PostgreSQL rows/s", "ratio", "StreamDB view caught up, s"],
                   irow) if irow else ["No ingest figures (see Phases)."]

    lines += ["", f"{h2} How cost grows", ""]
    g = (s.get("plan") or {}).get("growth") or {}
    lines += [f"Views: `bench/views_scale.py --scenario many --insert copy` at {num(g.get('views_rate'))} events/s "
              "over 4 streams (views cycle through filter, count/sum, avg/min/max, global count, TUMBLE, "
              "count DISTINCT); freshness of the linear probe view. Rate: one linear view "
              "(`--scenario fast`). Server cores: CPU seconds of StreamDB and its Spark JVM over the "
              "measured window / its length; CPU ms per 1,000 events likewise.", ""]
    for axis, label in (("views", "views"), ("rate", "events/s")):
        grow = []
        for p in growth_points(s, axis):
            key = p.get("views") if axis == "views" else p.get("rate")
            note = p.get("error") or ""
            if p.get("from"):
                note = f"from the {p['from']}"
            if p.get("failed_views"):
                note += f" {p['failed_views']} views failed"
            grow.append([num(key), num(p.get("achieved_rate")), num(p.get("p50_ms")), num(p.get("p99_ms")),
                         num(p.get("server_cores_used")), num(p.get("server_cpu_ms_per_1k_events")),
                         num(p.get("create_views_s")), p.get("status") or "-", note[:200]])
        if grow:
            lines += table([label, "events/s achieved", "p50 ms", "p99 ms", "server cores", "CPU ms / 1k events",
                            "CREATE s (first waits for Spark)", "status", "notes"], grow) + [""]
    if s.get("left_out"):
        lines += [f"{h2} What quick leaves out", "", *(f"- {x}" for x in s["left_out"]), ""]
    lines += [f"{h2} Phases", ""]
    lines += table(["phase", "status", "seconds", "error", "log"],
                   [[k, v.get("status", "-"), num(v.get("seconds")),
                     (v.get("error") or v.get("note") or "").replace("|", "/")[:300],
                     f"`{v['log']}`" if v.get("log") else ""] for k, v in (s.get("phases") or {}).items()])
    if plots:
        lines += ["", f"{h2} Plots", ""]
        lines += [f"![{PLOTS.get(p, p)}]({img_prefix}{p})" for p in plots]
    elif plot_note:
        lines += ["", f"Plots: {plot_note}"]
    return "\n".join(lines) + "\n"


def _load(v: Any) -> str:
    return ", ".join(f"{x:.1f}" for x in v) if isinstance(v, list | tuple) else "-"


def console_summary(s: dict[str, Any]) -> str:
    ts = s.get("targets") or targets(s)
    width = max(len(t["target"]) for t in ts)
    out = ["", "Targets:"]
    out += [f"  {t['target']:{width}s}  {t['status']:12s}  {t['measured']}" for t in ts]
    out += ["Phases:"]
    out += [f"  {k:17s} {v.get('status', '-'):8s} {num(v.get('seconds')):>6s} s  "
            f"{(v.get('error') or v.get('note') or '')[:160]}"
            for k, v in (s.get("phases") or {}).items()]
    if s.get("left_out"):
        out += ["Quick leaves out:"] + [f"  - {x}" for x in s["left_out"]]
    return "\n".join(out)


# ---- plots ------------------------------------------------------------------------------------


def plots(s: dict[str, Any], out_dir: Path) -> list[str]:
    """Writes the PNGs it has figures for; returns their file names. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

    rows = [r for r in nexmark_rows(s) if r["streamdb"]["eps"] or r["flink"]["eps"]]
    if rows:
        fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(rows) + 2), 4))
        xs = range(len(rows))
        sdb = [r["streamdb"]["eps"] or 0 for r in rows]
        fl = [r["flink"]["eps"] or 0 for r in rows]
        ax.bar([x - 0.2 for x in xs], sdb, 0.4, label="StreamDB")
        ax.bar([x + 0.2 for x in xs], fl, 0.4, label="Flink")
        ax.set_xticks(list(xs), [r["query"] for r in rows])
        vals = [v for v in sdb + fl if v > 0]
        if vals and max(vals) / min(vals) > 30:
            ax.set_yscale("log")
        ax.set_ylabel("events/s (median)")
        ax.set_title(f"Nexmark throughput, {num((s.get('nexmark') or {}).get('events'))} events")
        ax.legend()
        save(fig, "nexmark_throughput.png")

    for axis, name, xlabel in (("views", "freshness_vs_views.png", "materialized views"),
                               ("rate", "freshness_vs_rate.png", "events/s")):
        pts = [p for p in growth_points(s, axis) if isinstance(p.get("p99_ms"), int | float)]
        if not pts:
            continue
        key = "views" if axis == "views" else "rate"
        pts.sort(key=lambda p: p[key])
        xs = [p[key] for p in pts]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
        a1.plot(xs, [p["p50_ms"] for p in pts], "o-", label="p50")
        a1.plot(xs, [p["p99_ms"] for p in pts], "s-", label="p99")
        a1.set_xlabel(xlabel)
        a1.set_ylabel("freshness, ms")
        a1.legend()
        a2.plot(xs, [p.get("server_cores_used") or 0 for p in pts], "o-", color="tab:red")
        a2.set_xlabel(xlabel)
        a2.set_ylabel("server cores used (StreamDB + Spark)")
        for a in (a1, a2):
            if axis == "views" and len(xs) > 1 and max(xs) / max(min(xs), 1) >= 10:
                a.set_xscale("log")
            a.set_xticks(xs, [f"{x:,}" for x in xs])
            a.minorticks_off()
            a.set_ylim(bottom=0)
            a.grid(alpha=0.3)
        fig.suptitle("How cost grows: " + ("views at " + num((s.get("plan") or {}).get("growth", {}).get(
            "views_rate")) + " events/s" if axis == "views" else "event rate, one linear view"))
        save(fig, name)

    pts = point_rows(s)
    if pts:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for proto in dict.fromkeys(p["protocol"] for p in pts):
            mine = [p for p in pts if p["protocol"] == proto]
            for system, style in (("streamdb", "o-"), ("postgresql", "s--")):
                ys = [(p.get(system) or {}).get("median") for p in mine]
                if any(isinstance(y, int | float) for y in ys):
                    ax.plot([p["clients"] for p in mine], [y or 0 for y in ys], style,
                            label=f"{'StreamDB' if system == 'streamdb' else 'PostgreSQL'} {proto}")
        ax.set_yscale("log")
        ax.set_xticks(sorted({p["clients"] for p in pts}))
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("queries/s (median)")
        ax.set_title("Point SELECT by key")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "point_select.png")
    return written


# ---- writing ----------------------------------------------------------------------------------


def update_docs(docs: Path, section: str) -> bool:
    """Replaces the text between the markers (appends a "Latest results" section if they are missing)."""
    text = docs.read_text() if docs.exists() else "# Benchmarks\n"
    block = f"{START}\n{section.rstrip()}\n{END}"
    if START in text and END in text and text.index(START) < text.index(END):
        new = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        new = text.rstrip() + "\n\n## Latest results\n\n" + block + "\n"
    if new != text:
        docs.write_text(new)
    return True


def write_all(s: dict[str, Any], results: Path = RESULTS, docs: Path | None = DOCS) -> list[Path]:
    results.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    note = None
    try:
        names = plots(s, results)
        written += [results / n for n in names]
        for stale in set(PLOTS) - set(names):  # an earlier run's plot would not match these figures
            (results / stale).unlink(missing_ok=True)
    except ImportError:
        names = []
        note = "not drawn: matplotlib is not installed (`.venv/bin/pip install -e '.[bench]'`)"
    except Exception as e:  # a plot must not cost the tables
        names = []
        note = f"failed: {type(e).__name__}: {e}"
    (results / "summary.md").write_text(markdown(s, "", "#", names, note))
    written.append(results / "summary.md")
    if docs is not None:
        try:
            rel = Path("..") / results.resolve().relative_to(ROOT)
            prefix = f"{rel.as_posix()}/"
        except ValueError:
            prefix = f"{results.resolve().as_posix()}/"
        update_docs(docs, markdown(s, prefix, "###", names, note))
        written.append(docs)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--summary", type=Path, default=RESULTS / "summary.json")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    args = ap.parse_args()
    s = json.loads(args.summary.read_text())
    s["targets"] = targets(s)
    for p in write_all(s, args.summary.parent, None if args.no_docs else DOCS):
        print(f"written {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    print(console_summary(s))


if __name__ == "__main__":
    main()
