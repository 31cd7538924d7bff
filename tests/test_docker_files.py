"""docker/: what can be checked without a container engine (this machine has none, only the client).

The Dockerfile is linted with hadolint and the compose file validated against the Compose spec's
JSON schema; every flag and STREAMDB_* variable the files give the server must exist and be accepted
by the server's own configuration code; Spark versions and ports must agree; and the image's
entrypoint (first-start password bootstrap) and health check run here against a real server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pyspark
import pytest
import yaml
from conftest import ARTIFACTS, ROOT, free_ports

from streamdb.cli import _parser
from streamdb.config import Settings, check_network_security, load_settings

DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
ENTRYPOINT = DOCKER / "entrypoint.py"
HEALTHCHECK = DOCKER / "healthcheck.py"
VENV_BIN = Path(sys.executable).parent
# Variables the entrypoint consumes (and removes before the server sees them).
ENTRYPOINT_VARIABLES = {"STREAMDB_PASSWORD", "STREAMDB_PASSWORD_FILE"}


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage and the build stage, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in _dockerfile_instructions():
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def _serve_help_flags() -> set[str]:
    out = subprocess.run([sys.executable, "-m", "streamdb.cli", "serve", "--help"], capture_output=True,
                         text=True, check=True, cwd=str(ROOT)).stdout
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out))


def _streamdb_service() -> dict:
    return _compose()["services"]["streamdb"]


# --- static checks ---------------------------------------------------------------------------------

def test_dockerfile_passes_hadolint():
    result = subprocess.run([str(VENV_BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_compose_file_matches_the_compose_spec():
    result = subprocess.run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                             str(COMPOSE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    services = _compose()["services"]
    assert set(services) == {"streamdb", "spark-master", "spark-worker", "kafka"}
    assert services["streamdb"]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile",
                                             "args": {"SPARK_VERSION": pyspark.__version__}}
    assert (ROOT / ".dockerignore").is_file()  # at the root of the build context


def test_spark_versions_agree_with_our_pyspark():
    version = pyspark.__version__
    args = [rest for word, rest in _dockerfile_instructions() if word == "ARG" and rest.startswith("SPARK_VERSION")]
    assert args == [f"SPARK_VERSION={version}"]
    scala = {m.group(1) for m in (re.match(r"spark-core_(\d+\.\d+)-", p.name)
                                   for p in (Path(pyspark.__file__).parent / "jars").iterdir()) if m}
    assert len(scala) == 1
    scala_version = scala.pop()
    services = _compose()["services"]
    for name in ("spark-master", "spark-worker"):
        assert services[name]["image"] == f"apache/spark:{version}-scala{scala_version}-java17-ubuntu"
    master = services["spark-master"]["command"]
    master_url = f"spark://spark-master:{master[master.index('--port') + 1]}"
    assert master_url in services["spark-worker"]["command"]
    command = services["streamdb"]["command"]
    assert command[command.index("--spark-master") + 1] == master_url


def test_every_flag_and_variable_given_to_the_server_exists():
    flags = _serve_help_flags()
    service = _streamdb_service()
    command = service["command"]
    assert command[0] == "serve"
    given_flags = {a for a in command[1:] if a.startswith("--")}
    # The entrypoint's bootstrap run adds these.
    given_flags |= set(re.findall(r'"(--[a-z-]+)"', ENTRYPOINT.read_text()))
    assert given_flags <= flags, given_flags - flags
    settings_vars = {"STREAMDB_" + name.upper() for name in Settings.model_fields}
    given_vars = {k for k in {**_dockerfile_env(), **service["environment"]} if k.startswith("STREAMDB_")}
    given_vars |= set(re.findall(r'"(STREAMDB_[A-Z_]+)"', ENTRYPOINT.read_text()))
    assert given_vars <= settings_vars | ENTRYPOINT_VARIABLES, given_vars - settings_vars - ENTRYPOINT_VARIABLES


def test_the_server_accepts_the_images_configuration():
    """The image's environment plus compose's command, through the server's own loading and checks."""
    service = _streamdb_service()
    environ = {k: v for k, v in {**_dockerfile_env(), **service["environment"]}.items()
               if k.startswith("STREAMDB_") and k not in ENTRYPOINT_VARIABLES}
    args = vars(_parser().parse_args(service["command"]))
    cli = {k: v for k, v in args.items() if k not in ("command", "config")}
    settings = load_settings(cli, environ=environ)
    check_network_security(settings)  # 0.0.0.0 needs password authentication
    assert settings.host == "0.0.0.0" and settings.auth_method == "scram-sha-256"
    assert settings.log == "kafka" and settings.kafka_bootstrap == "kafka:9092"
    assert settings.spark_master == "spark://spark-master:7077"
    assert str(settings.data_dir).startswith("/var/lib/streamdb/")
    volumes = [v.split(":")[1] for v in service["volumes"]]
    assert volumes == ["/var/lib/streamdb"]
    assert any(rest == '["/var/lib/streamdb"]' for word, rest in _dockerfile_instructions() if word == "VOLUME")


def test_ports_agree():
    defaults = Settings()
    exposed = {int(p) for word, rest in _dockerfile_instructions() if word == "EXPOSE" for p in rest.split()}
    assert exposed == {defaults.port, defaults.console_port} == {6875, 6876}
    published = {int(p.split(":")[-1]) for p in _streamdb_service()["ports"]}
    assert published == exposed
    kafka = _compose()["services"]["kafka"]["environment"]
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert ":9092" in kafka["KAFKA_LISTENERS"]


def test_the_build_context_lets_in_what_the_dockerfile_copies():
    allowed = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    copied = []
    for word, rest in _dockerfile_instructions():
        if word == "COPY" and "--from=" not in rest:
            copied += rest.split()[:-1]
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert any(source == a or source.startswith(a + "/") for a in allowed), source
    for word, rest in _dockerfile_instructions():
        if word in ("HEALTHCHECK", "ENTRYPOINT"):
            for script in re.findall(r"/usr/local/lib/streamdb-docker/([\w.]+)", rest):
                assert f"docker/{script}" in copied


# --- the entrypoint and the health check, run here against a real server -------------------------

class EntrypointServer:
    """docker/entrypoint.py run as the image runs it (its ENV), but on loopback and free ports."""

    def __init__(self, data_dir: Path, extra_env: dict[str, str]) -> None:
        self.port, console_port = free_ports(2)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMDB_")}
        env.update(_dockerfile_env())
        env.update({"STREAMDB_HOST": "127.0.0.1", "STREAMDB_PORT": str(self.port),
                    "STREAMDB_CONSOLE_PORT": str(console_port), "STREAMDB_DATA_DIR": str(data_dir),
                    "HOME": str(data_dir.parent), **extra_env})
        self.env = env
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"entrypoint-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(ENTRYPOINT), "serve", "--spark-master", "local[2]"],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def connect(self, password: str | None) -> psycopg.Connection:
        return psycopg.connect(host="127.0.0.1", port=self.port, user="streamdb", dbname="streamdb",
                               password=password or "", connect_timeout=5, autocommit=True)

    def wait_ready(self, password: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                self.connect(password).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def healthcheck(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(HEALTHCHECK)], capture_output=True, text=True,
                              env={**os.environ, "STREAMDB_PORT": str(self.port)}, timeout=30)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.proc.returncode


@pytest.mark.slow
def test_entrypoint_sets_the_password_on_first_start_only_and_the_healthcheck_sees_the_server():
    password = "it's a \\ long sécret"
    with tempfile.TemporaryDirectory(prefix="streamdb-entrypoint-") as d:
        secret = Path(d) / "password"
        secret.write_text(password + "\n")
        data = Path(d) / "data"
        first = EntrypointServer(data, {"STREAMDB_PASSWORD_FILE": str(secret)})
        assert first.healthcheck().returncode == 1  # nothing listens yet
        first.start()
        try:
            first.wait_ready(password)
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                first.connect("wrong").close()
            with pytest.raises(psycopg.OperationalError, match="no password supplied"):  # asked for one
                first.connect(None).close()
            with first.connect(password) as c:
                assert c.execute("SELECT current_user").fetchone() == ("streamdb",)
                c.execute("CREATE TABLE kept (id INT PRIMARY KEY, v TEXT)")
                c.execute("INSERT INTO kept VALUES (1, 'one')")
            health = first.healthcheck()
            assert health.returncode == 0, health.stderr
        finally:
            assert first.stop() == 0
        assert "the superuser streamdb has its password" in first.log()

        # A later start ignores a (different) password: the data directory is not new.
        second = EntrypointServer(data, {"STREAMDB_PASSWORD": "another one"})
        second.start()
        try:
            second.wait_ready(password)
            with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
                second.connect("another one").close()
            with second.connect(password) as c:
                assert c.execute("SELECT id, v FROM kept").fetchall() == [(1, "one")]
        finally:
            assert second.stop() == 0
        assert "password variable is ignored" in second.log()


def test_entrypoint_refuses_a_new_data_directory_without_a_password():
    with tempfile.TemporaryDirectory(prefix="streamdb-entrypoint-") as d:
        data = Path(d) / "data"
        server = EntrypointServer(data, {})
        server.start()
        assert server.proc is not None
        assert server.proc.wait(timeout=60) == 2
        assert "set STREAMDB_PASSWORD or STREAMDB_PASSWORD_FILE" in server.log()
        assert not (data / "log").exists()


# --- the operations guide's table of settings --------------------------------------------------------

def test_operations_guide_lists_every_setting_with_its_flag_and_default():
    """docs/guide/operations.md's table must stay complete and accurate as settings are added."""
    page = (ROOT / "docs" / "guide" / "operations.md").read_text()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in page.splitlines() if line.startswith("| `")]
    rows = [row for row in rows if len(row) == 4]  # the settings table (the other has 2 columns)
    documented: dict[str, tuple[str, str]] = {}
    for setting_cell, flag_cell, default_cell, _meaning in rows:
        for name in re.findall(r"`([a-z_0-9]+)`", setting_cell):
            documented[name] = (flag_cell, default_cell)
    assert set(documented) == set(Settings.model_fields)
    flags_by_setting: dict[str, set[str]] = {}
    for action in _parser()._subparsers._group_actions[0].choices["serve"]._actions:  # type: ignore[union-attr]
        for flag in action.option_strings:
            if flag.startswith("--") and action.dest not in ("help", "config"):
                flags_by_setting.setdefault(action.dest, set()).add(flag)
    assert set(flags_by_setting) <= set(Settings.model_fields)
    defaults = Settings()
    for name, (flag_cell, default_cell) in documented.items():
        assert set(re.findall(r"`(--[a-z-]+)`", flag_cell)) == flags_by_setting.get(name, set()), name
        default = getattr(defaults, name)
        shown = re.fullmatch(r"`([^`]*)`|none", default_cell)
        assert shown, (name, default_cell)
        literal = shown.group(1)
        if literal is None:
            assert default is None, name
        elif literal.startswith("<"):
            assert default is None, name  # derived from another setting
        elif isinstance(default, bool):
            assert literal == str(default).lower(), name
        elif isinstance(default, int):
            assert int(literal) == default, name
        elif isinstance(default, Path):
            assert Path(literal) == default, name
        elif isinstance(default, dict):
            assert json.loads(literal) == default, name  # a table: `{}`
        else:
            assert literal == default, name


def test_operations_guide_configuration_examples_work():
    """The page's TOML example loads, and its example of a refused variable is what the server prints."""
    page = (ROOT / "docs" / "guide" / "operations.md").read_text()
    toml_blocks = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert len(toml_blocks) == 1
    with tempfile.TemporaryDirectory(prefix="streamdb-ops-") as d:
        path = Path(d) / "streamdb.toml"
        path.write_text(toml_blocks[0])
        settings = load_settings({}, config_file=str(path), environ={})
    assert (settings.host, settings.auth_method, settings.max_connections) == ("0.0.0.0", "scram-sha-256", 200)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMDB_")}
    result = subprocess.run([sys.executable, "-m", "streamdb.cli", "serve"], capture_output=True, text=True,
                            env={**env, "STREAMDB_PROT": "7000"}, cwd=str(ROOT), timeout=60)
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message == "streamdb: invalid configuration in environment: unknown setting STREAMDB_PROT"
    assert " ".join(message.split()) in " ".join(page.split())
