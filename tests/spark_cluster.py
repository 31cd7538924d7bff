"""A Spark standalone cluster on loopback for tests: one master and N workers, each its own process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SparkCluster:
    def __init__(self, work: Path, workers: int = 2, log_dir: Path | None = None) -> None:
        self.work = work
        self.workers = workers
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_dir = log_dir or work

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable,
                "SPARK_LOCAL_DIRS": str(self.work / "local")}

    def _spawn(self, name: str, args: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"spark-{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
        self.procs.append(subprocess.Popen([str(SPARK_CLASS), *args], stdout=log, stderr=subprocess.STDOUT,
                                           env=self._env(), start_new_session=True))

    def start(self, timeout: float = 90) -> None:
        (self.work / "local").mkdir(parents=True, exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(_free_port())])
        self._wait_port(self.port, timeout)
        for i in range(self.workers):
            work_dir = self.work / f"worker-{i}"
            work_dir.mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                        "--cores", "1", "--memory", "1200m", "--webui-port", str(_free_port()),
                                        "--work-dir", str(work_dir)])
        self._wait_workers(timeout)

    def _wait_port(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"Spark master did not listen on {port}")

    def _wait_workers(self, timeout: float) -> None:
        log = self.log_dir / "spark-master.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.read_text(errors="replace").count("Registering worker") >= self.workers:
                return
            time.sleep(0.3)
        raise RuntimeError("Spark workers did not register with the master")

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
