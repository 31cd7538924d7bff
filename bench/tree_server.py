"""A fresh server started from a given source tree (this one, or a peer worktree to compare
with), for the benchmarks that run two trees alternately in one session."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

R = TypeVar("R")


def runner_of(repo: Path) -> Any:
    """`repo`'s own bench/nexmark/run_streamdb.py as a module: its Server starts that tree's code."""
    spec = importlib.util.spec_from_file_location(f"run_streamdb_{abs(hash(str(repo)))}",
                                                  repo / "bench/nexmark/run_streamdb.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def server_from(repo: Path) -> Iterator[tuple[Any, Any]]:
    """(server, runner module): a fresh server (real Spark, local[2]) of `repo` on a temporary
    data directory, stopped on exit."""
    runner = runner_of(repo)
    cwd = os.getcwd()
    os.chdir(repo)  # the server runs from its own tree
    try:
        with tempfile.TemporaryDirectory() as d:
            server = runner.Server(Path(d), "local[2]")
            try:
                yield server, runner
            finally:
                server.stop()
    finally:
        os.chdir(cwd)


def alternate(peer: Path | None, rounds: int, measure: Callable[[Path], R],
              show: Callable[[R], str]) -> dict[str, list[R]]:
    """`measure` of this tree ("this") and of `peer` ("peer", if any), alternating per round;
    each round's figures go to stderr as `show` writes them."""
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here} | ({"peer": peer.resolve()} if peer else {})
    runs: dict[str, list[R]] = {k: [] for k in trees}
    for r in range(rounds):
        for label, tree in trees.items():
            runs[label].append(measure(tree))
            print(f"round {r + 1} {label}: {show(runs[label][-1])}", file=sys.stderr, flush=True)
    return runs
