"""Server configuration: CLI flags, STREAMDB_* environment variables and a TOML file.

Precedence (highest first): command-line flags, environment, TOML file, defaults.
pydantic validates everything at this edge; unknown keys are rejected.
"""

from __future__ import annotations

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
    # Ad hoc reads over more input rows than this run on Spark; smaller ones on the embedded engine.
    spark_read_threshold_rows: int = Field(1_000_000, ge=0)
    spark_shuffle_partitions: int = Field(2, ge=1)
    # Start Spark at server start (in the background). Tests of the wire layer may turn it off.
    spark_enabled: bool = True
    max_connections: int = Field(100, ge=1)
    # A push query's changes waiting for a slow client; past this it ends with SQLSTATE 53000.
    subscriber_buffer_changes: int = Field(100_000, ge=1)
    database: str = "streamdb"
    # Connectors: FILE connector paths must lie under this directory (default: <data_dir>/files).
    file_root: Path | None = None
    # Kafka client properties that read files, load code or fetch URLs (ssl.*.location,
    # sasl.kerberos.*, sasl.oauthbearer.*, plugin.library.paths) are refused unless this is set.
    allow_kafka_file_properties: bool = False

    @field_validator("spark_master")
    @classmethod
    def _check_master(cls, v: str) -> str:
        if not (v.startswith("local") or v.startswith("spark://") or v.startswith("yarn")
                or v.startswith("k8s://")):
            raise ValueError("must be local[N], local[*], spark://host:port, yarn or k8s://...")
        return v


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
