"""`make soak`: 50 kill -9 cycles (tests/faults/kill_cycles.py), a real full disk on a small tmpfs
when this machine can mount one (tests/faults/disk_full.py) and, when it exists, the wire fuzzer
(tests/fuzz/wire_fuzz.py) with 100,000 cases, each against a fresh server. Figures go to
test-artifacts/soak.json; the exit status is non-zero when any check failed.

    python -m tests.faults.soak [--cycles 50] [--fuzz-cases 100000] [--seed N] [--no-disk-full] [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import ARTIFACTS, ROOT, ServerProcess
from tests.faults.disk_full import run_real_disk_full
from tests.faults.kill_cycles import run_kill_cycles

WIRE_FUZZER = ROOT / "tests" / "fuzz" / "wire_fuzz.py"


def kill_cycles(cycles: int, seed: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="streamdb-soak-") as d:
        srv = ServerProcess(Path(d) / "data", "soak")
        srv.start()
        started = time.monotonic()
        try:
            figures = run_kill_cycles(srv, cycles, Path(d) / "acks", seed=seed,
                                      report=lambda line: print(line, flush=True))
        finally:
            try:
                srv.stop()
            except Exception:  # noqa: BLE001 - already dead is fine
                pass
        return {**figures.summary(), "seconds": round(time.monotonic() - started, 1), "server_log": str(srv.log_path)}


def wire_fuzz(cases: int, seed: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="streamdb-soak-fuzz-") as d:
        srv = ServerProcess(Path(d) / "data", "soak-fuzz")
        srv.start()
        started = time.monotonic()
        try:
            args = [sys.executable, "-m", "tests.fuzz.wire_fuzz", "--cases", str(cases),
                    "--host", srv.host, "--port", str(srv.port)]
            if seed is not None:
                args += ["--seed", str(seed)]
            proc = subprocess.run(args, cwd=str(ROOT), capture_output=True, text=True)
            server_alive = srv.proc is not None and srv.proc.poll() is None
        finally:
            try:
                srv.stop()
            except Exception:  # noqa: BLE001
                pass
        return {"cases": cases, "exit_code": proc.returncode, "server_alive_after": server_alive,
                "ok": proc.returncode == 0 and server_alive, "seconds": round(time.monotonic() - started, 1),
                "output_tail": (proc.stdout + proc.stderr)[-4000:], "server_log": str(srv.log_path)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--fuzz-cases", type=int, default=100_000, help="0 skips the wire fuzzer")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-disk-full", action="store_true", help="skip the real (tmpfs) disk-full check")
    parser.add_argument("--output", type=Path, default=ARTIFACTS / "soak.json")
    args = parser.parse_args(argv)

    result: dict[str, Any] = {"kill_cycles": kill_cycles(args.cycles, args.seed)}
    print(json.dumps({k: v for k, v in result["kill_cycles"].items() if "details" not in k}, indent=1), flush=True)
    if not args.no_disk_full:
        result["disk_full_tmpfs"] = run_real_disk_full()
        print(json.dumps(result["disk_full_tmpfs"], indent=1), flush=True)
    if args.fuzz_cases > 0:
        if WIRE_FUZZER.exists():
            result["wire_fuzz"] = wire_fuzz(args.fuzz_cases, args.seed)
            print(result["wire_fuzz"]["output_tail"][-1500:], flush=True)
        else:
            result["wire_fuzz"] = {"skipped": f"{WIRE_FUZZER.relative_to(ROOT)} does not exist", "ok": True}
    result["ok"] = all(part.get("ok") for part in result.values() if isinstance(part, dict))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"soak {'passed' if result['ok'] else 'FAILED'}; figures in {args.output}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
