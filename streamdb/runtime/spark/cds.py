"""A class data sharing archive of Spark's classes, so the Spark JVM starts in half the time.

Most of the ~11 s a Spark session takes to start here is the JVM loading and verifying Spark's
classes. JDK 17 can dump the classes a run loaded into an archive (-XX:ArchiveClassesAtExit) and
map them from it on later starts (-XX:SharedArchiveFile): measured on this machine, a session is
ready in 6.5 s instead of 11.5 s (docs/views.md). `make install` writes the archive once by
running a session through a batch query and a small stateful streaming query; its name carries
the JDK and the Spark version, so another JDK or Spark simply finds none. A JVM that cannot use
an archive (another classpath, say) starts without it, as it did before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

# A stale or mismatched archive is not an error: the JVM then loads classes as usual. Its CDS
# warnings would only be noise in the server's output.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_name() -> str | None:
    """The archive's file name for the JDK Spark will run on and this Spark (None: no JDK)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    st = java.stat()
    h = hashlib.sha256(f"{java}:{st.st_size}:{st.st_mtime_ns}:{pyspark.__version__}".encode())
    return f"spark-cds-{h.hexdigest()[:16]}.jsa"


def archive_path() -> Path | None:
    """The archive for this JDK and Spark, if `make install` wrote one."""
    from streamdb.runtime.spark.jvm import _build_dirs

    name = archive_name()
    if name is None:
        return None
    for d in _build_dirs():
        if (d / name).is_file():
            return d / name
    return None


def java_options() -> list[str]:
    """The driver JVM's options to start from the archive (none when there is no archive)."""
    path = archive_path()
    return [f"-XX:SharedArchiveFile={path}", *QUIET.split()] if path is not None else []


def create() -> Path | None:
    """Write the archive, if there is none yet: a Spark session runs the kinds of work the server
    starts with, and its JVM dumps the classes it loaded when it exits."""
    from streamdb.runtime.spark.jvm import _build_dirs

    name = archive_name()
    if name is None or archive_path() is not None:
        return archive_path()
    target = next((d for d in _build_dirs() if _writable(d)), None)
    if target is None:
        return None
    partial = target / f"{name}.{os.getpid()}.tmp"
    with tempfile.TemporaryDirectory(prefix="streamdb-cds-") as tmp:
        _run_session(Path(tmp), f"-XX:ArchiveClassesAtExit={partial}")
    if not partial.is_file():
        log.warning("no class data sharing archive was written; Spark starts without one")
        return None
    os.replace(partial, target / name)
    for old in target.glob("spark-cds-*.jsa"):
        if old.name != name:
            old.unlink(missing_ok=True)
    return target / name


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return True
    except OSError:
        return False


def _run_session(work: Path, option: str) -> None:
    """A Spark session (in a child process, whose JVM exits with it) through the work the server
    does: a batch query over Arrow data, and a stateful streaming query with foreachBatch."""
    import subprocess
    import sys

    script = f"""
import pyarrow as pa
from streamdb.runtime.spark.session import SparkRuntime
rt = SparkRuntime("local[2]", work_dir={str(work / "spark")!r})
conf = rt.spark_conf()
conf["spark.driver.extraJavaOptions"] += " " + {option!r}
rt.spark_conf = lambda: conf
rt.start_background()
rt.wait_ready(300)
spark = rt.session()
src = {str(work / "in")!r}
import os
os.makedirs(src)
with open(os.path.join(src, "a.json"), "w") as f:
    f.write('{{"k": 1, "v": 2}}\\n{{"k": 1, "v": 3}}\\n')
stream = spark.readStream.schema("k BIGINT, v BIGINT").json(src).groupBy("k").sum("v")
q = (stream.writeStream.outputMode("update").trigger(availableNow=True)
     .option("checkpointLocation", {str(work / "ckpt")!r})
     .foreachBatch(lambda df, i: df.toArrow()).start())
q.awaitTermination(300)
# The JVM writes the archive as it exits, which can take longer than the server's bounded stop
# waits for (15 s): stop the session, then wait for the JVM itself.
proc = spark.sparkContext._gateway.proc
spark.stop()
proc.stdin.close()
proc.wait(timeout=600)
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1200, env=env)
    if done.returncode != 0:
        log.warning("the class data sharing run failed: %s", (done.stderr or done.stdout)[-1500:])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = create()
    print(path if path is not None else "no class data sharing archive (Spark starts without one)")
