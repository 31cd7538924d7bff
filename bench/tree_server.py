"""A fresh server started from a given source tree (this one, or a peer worktree to compare
with), for the benchmarks that run two trees alternately in one session."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
