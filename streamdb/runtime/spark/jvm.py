"""The JVM half of the view engine: StreamDB's incremental operators, compiled into a jar.

The operators (streamdb/runtime/spark/jvm/src, Java) run inside Spark's transformWithState on the
executors, next to the state store they keep their state in; Python code only builds the plan.
Measured on this machine (docs/views.md): a Python stateful operator (applyInPandasWithState or
transformWithStateInPandas) spends 0.4-0.7 ms per key and micro-batch, the JVM one about 7 us.

The jar is built with javac against pyspark's own jars (no download: Maven Central is not
needed) by `make install`, and again here whenever the sources changed: its name carries a hash
of the sources and the Spark version.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path

from streamdb.errors import ConfigurationError

log = logging.getLogger(__name__)

SOURCES = Path(__file__).parent / "jvm" / "src"
_lock = threading.Lock()


def pyspark_jars() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConfigurationError("pyspark is not installed")
    return Path(spec.origin).parent / "jars"


def _source_files() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def _fingerprint() -> str:
    h = hashlib.sha256()
    for path in _source_files():
        h.update(str(path.relative_to(SOURCES)).encode())
        h.update(path.read_bytes())
    for jar in sorted(pyspark_jars().glob("spark-sql_*.jar")):
        h.update(jar.name.encode())
    return h.hexdigest()[:16]


def _build_dirs() -> list[Path]:
    return [Path(__file__).parent / "jvm" / "build", Path.home() / ".cache" / "streamdb"]


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if found is None:
        raise ConfigurationError(
            "the view engine's operators need a Java compiler (javac, JDK 17+) to build once",
            hint="Run `make install`, or install openjdk-17-jdk-headless.")
    return found


def jar_path() -> Path:
    """The operators' jar for these sources, built if it is not there yet."""
    name = f"streamdb-ops-{_fingerprint()}.jar"
    with _lock:
        for d in _build_dirs():
            if (d / name).exists():
                return d / name
        for d in _build_dirs():
            try:
                d.mkdir(parents=True, exist_ok=True)
                probe = d / f".probe-{os.getpid()}"
                probe.write_text("")
                probe.unlink()
            except OSError:
                continue
            build(d / name)
            return d / name
    raise ConfigurationError("no writable directory to build the view engine's operators in")


def build(target: Path) -> None:
    """Compile the sources into `target` (written under a temporary name, then renamed)."""
    with tempfile.TemporaryDirectory(prefix="streamdb-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [_javac(), "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", f"{pyspark_jars()}/*",
               "-d", str(classes), *map(str, _source_files())]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigurationError("building the view engine's operators failed",
                                     detail=(done.stderr or done.stdout)[-2000:])
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: streamdb\n")
            for f in sorted(classes.rglob("*.class")):
                jar.write(f, f.relative_to(classes).as_posix())
        os.replace(partial, target)
        for old in target.parent.glob("streamdb-ops-*.jar"):
            if old != target:
                old.unlink(missing_ok=True)
    log.info("built %s", target)


if __name__ == "__main__":
    print(jar_path())
