"""Server configuration: CLI flags, STREAMDB_* environment variables and a TOML file.

Precedence (highest first): command-line flags, environment, TOML file, defaults.
pydantic validates everything at this edge; unknown keys are rejected.
"""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from streamdb.errors import ConfigurationError

ENV_PREFIX = "STREAMDB_"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(6875, ge=0, le=65535)
    data_dir: Path = Path("./streamdb-data")
    spark_master: str = "local[*]"
    log: Literal["rocksdb", "kafka"] = "rocksdb"
    kafka_bootstrap: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # A log append at least this large goes to the RocksDB log as an SST file of its own, ingested
    # on the lowest level it fits, not through the WAL, the memtable and the compactions after
    # them (docs/storage.md, "Large batches as ingested files").
    storage_ingest_bytes: int = Field(4 << 20, ge=1)
    # A pipeline batch with at least this many view changes (a backfill's) is committed while
    # Spark computes the next one; smaller (live) batches are committed before it starts, which
    # keeps their freshness on a machine whose cores are busy (docs/views.md, "The commit beside
    # the next batch").
    pipeline_async_commit_rows: int = Field(50_000, ge=1)
    # A pipeline of views with temporal filters (`WHERE ts > now() - INTERVAL ...`) runs a batch
    # this often while a row's time to enter or leave may have come, new input or not: the
    # granularity of their now(). Each costs Spark's fixed per-batch work (docs/views.md).
    clock_tick_ms: int = Field(1000, ge=100, le=3_600_000)
    # Ad hoc reads over more input rows than this run on Spark; smaller ones on the embedded engine.
    spark_read_threshold_rows: int = Field(1_000_000, ge=0)
    spark_shuffle_partitions: int = Field(2, ge=1)
    # More Spark configuration (a TOML table; STREAMDB_SPARK_CONF as a JSON object), e.g. executor
    # memory on a cluster. It wins over StreamDB's own choices, so it can also tune those.
    spark_conf: dict[str, str] = Field(default_factory=dict)
    # Niceness of the Spark JVM this server starts (the driver; in local mode the executors too):
    # view maintenance is background work, so a client's INSERT or read gets a core first when
    # both want one (docs/views.md, "Sharing the cores with the server"). 0: the server's own priority.
    spark_nice: int = Field(10, ge=0, le=19)
    # More options for the Spark JVMs (the driver; the executors on a cluster), after StreamDB's own
    # (the class archive, the JIT's thresholds), so an option given here wins over theirs.
    spark_jvm_options: str | None = None
    # Start Spark at server start (in the background). Tests of the wire layer may turn it off.
    spark_enabled: bool = True
    max_connections: int = Field(100, ge=1)
    # A client must send its startup packet and authenticate within this (PostgreSQL's
    # authentication_timeout); otherwise its connection is closed.
    authentication_timeout_s: int = Field(60, ge=1, le=600)
    # A push query's changes waiting for a slow client; past this it ends with SQLSTATE 53000.
    subscriber_buffer_changes: int = Field(100_000, ge=1)
    # Push queries over aggregates and joins that get a streaming pipeline of their own (more
    # share their depth's pipeline: each pipeline is a streaming query on the cluster's cores).
    push_pipelines: int = Field(4, ge=0)
    # Limits (docs/limits.md). A client message longer than this closes the connection (08P01).
    max_message_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=2**31 - 5)
    # Default statement_timeout of new sessions (ms, 0 = off): longer statements fail with 57014.
    statement_timeout_ms: int = Field(300_000, ge=0, le=2**31 - 1)
    # Default idle_in_transaction_session_timeout (ms, 0 = off): such sessions end with FATAL 25P03.
    idle_in_transaction_session_timeout_ms: int = Field(600_000, ge=0, le=2**31 - 1)
    # A SELECT result held in memory larger than these fails with 54000 (0 = no limit).
    max_result_rows: int = Field(1_000_000, ge=0)
    max_result_bytes: int = Field(1024**3, ge=0)
    database: str = "streamdb"
    # Connectors: FILE connector paths must lie under this directory (default: <data_dir>/files).
    file_root: Path | None = None
    # Kafka client properties that read files, load code or fetch URLs (ssl.*.location,
    # sasl.kerberos.*, sasl.oauthbearer.*, plugin.library.paths) are refused unless this is set.
    allow_kafka_file_properties: bool = False
    # Client authentication (docs/security.md). "md5": md5 for roles that have an md5 hash, else SCRAM.
    # "trust" is refused on a non-loopback address (see check_network_security).
    auth_method: Literal["trust", "scram-sha-256", "md5"] = "trust"
    # TLS: PEM certificate (chain) and private key; both or neither.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Refuse plaintext connections (28000) instead of offering TLS.
    tls_required: bool = False
    # Roles' passwords are stored as SCRAM-SHA-256 verifiers; when on, an md5 hash is also
    # stored (for clients too old for SCRAM). Off by default: md5 is weak.
    password_encryption_md5: bool = False
    # The web console and /metrics (docs/console.md) listen on this port on `host` (0 = any free port).
    console_port: int = Field(6876, ge=0, le=65535)
    # The console UI and its /api routes; /metrics stays on the console port unless metrics is off too.
    console: bool = True
    metrics: bool = True

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _check_spark_conf(cls, v: Any) -> Any:
        if isinstance(v, str):  # from the environment
            try:
                v = json.loads(v)
            except ValueError as e:
                raise ValueError(f"must be a JSON object of Spark settings ({e})") from e
        if not isinstance(v, dict):
            raise ValueError("must be a table of Spark settings, e.g. {\"spark.executor.memory\" = \"4g\"}")
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not key.startswith("spark."):
                raise ValueError(f"'{key}' is not a Spark setting (they start with 'spark.')")
            if isinstance(value, (dict, list)) or value is None:
                raise ValueError(f"{key}: a Spark setting's value is a string, number or boolean")
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @field_validator("spark_master")
    @classmethod
    def _check_master(cls, v: str) -> str:
        if not (v.startswith("local") or v.startswith("spark://") or v.startswith("yarn")
                or v.startswith("k8s://")):
            raise ValueError("must be local[N], local[*], spark://host:port, yarn or k8s://...")
        return v


_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost; anything else (0.0.0.0, '', a LAN address) is reachable from outside."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_network_security(settings: Settings) -> None:
    """Refuse settings that would expose the server without authentication, or half-configured TLS.

    Checked when the server starts (not in Settings: the file/env/CLI layers are validated one by one)."""
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        raise ConfigurationError("tls_cert_file and tls_key_file must be set together "
                                 "(--tls-cert-file and --tls-key-file)")
    for path in (settings.tls_cert_file, settings.tls_key_file):
        if path is not None and not path.is_file():
            raise ConfigurationError(f"TLS file {path} does not exist or is not a file")
    if settings.tls_required and settings.tls_cert_file is None:
        raise ConfigurationError("tls_required needs a certificate: set --tls-cert-file and --tls-key-file")
    if settings.auth_method == "trust" and not is_loopback_host(settings.host):
        raise ConfigurationError(
            f"refusing to listen on {settings.host or 'all addresses'} with auth_method 'trust': anyone who "
            "can reach the port could connect as any role. Configure authentication: start once on "
            "127.0.0.1, create a user with a password (CREATE USER name WITH PASSWORD '...' SUPERUSER), "
            "then serve with --auth-method scram-sha-256 (and TLS: --tls-cert-file/--tls-key-file). "
            "See docs/security.md.")


def _describe(err: ValidationError, source: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(root)"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown setting '{loc}'")
        else:
            parts.append(f"{loc}: {e['msg']}")
    return f"invalid configuration in {source}: " + "; ".join(parts)


def _from_env(environ: dict[str, str]) -> dict[str, Any]:
    known = set(Settings.model_fields)
    out: dict[str, Any] = {}
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX) or key == ENV_PREFIX + "CONFIG":
            continue
        name = key[len(ENV_PREFIX):].lower()
        if name.startswith("test_"):
            continue  # STREAMDB_TEST_* belong to the test suite, not the server
        if name not in known:
            raise ConfigurationError(f"invalid configuration in environment: unknown setting {key}")
        out[name] = value
    return out


def load_settings(cli: dict[str, Any] | None = None, *, config_file: str | None = None,
                  environ: dict[str, str] | None = None) -> Settings:
    """Merge file < environment < CLI and validate."""
    environ = dict(os.environ) if environ is None else environ
    merged: dict[str, Any] = {}
    path = config_file or environ.get(ENV_PREFIX + "CONFIG")
    if path:
        try:
            with open(path, "rb") as f:
                file_values = tomllib.load(f)
        except OSError as e:
            raise ConfigurationError(f"cannot read configuration file {path}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigurationError(f"configuration file {path} is not valid TOML: {e}") from e
        file_values = file_values.get("streamdb", file_values)
        try:
            Settings(**file_values)
        except ValidationError as e:
            raise ConfigurationError(_describe(e, path)) from e
        merged.update(file_values)
    env_values = _from_env(environ)
    try:
        Settings(**{**merged, **env_values})
    except ValidationError as e:
        raise ConfigurationError(_describe(e, "environment (STREAMDB_*)")) from e
    merged.update(env_values)
    merged.update({k: v for k, v in (cli or {}).items() if v is not None})
    try:
        return Settings(**merged)
    except ValidationError as e:
        raise ConfigurationError(_describe(e, "command-line options")) from e
