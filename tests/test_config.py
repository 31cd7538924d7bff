"""Configuration: flags over environment over TOML file, validated with clear messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamdb.config import load_settings
from streamdb.errors import ConfigurationError


def test_defaults():
    s = load_settings({}, environ={})
    assert (s.host, s.port, str(s.data_dir), s.spark_master, s.log) == (
        "127.0.0.1", 6875, "streamdb-data", "local[*]", "rocksdb")


def test_precedence_file_env_cli(tmp_path: Path):
    cfg = tmp_path / "streamdb.toml"
    cfg.write_text('port = 7001\nhost = "0.0.0.0"\nlog_level = "debug"\n')
    s = load_settings({}, config_file=str(cfg), environ={"STREAMDB_PORT": "7002"})
    assert (s.port, s.host, s.log_level) == (7002, "0.0.0.0", "debug")
    s = load_settings({"port": 7003}, config_file=str(cfg), environ={"STREAMDB_PORT": "7002"})
    assert s.port == 7003
    s = load_settings({}, environ={"STREAMDB_CONFIG": str(cfg)})
    assert s.port == 7001


def test_unknown_and_invalid_settings_are_refused(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="unknown setting STREAMDB_PROT"):
        load_settings({}, environ={"STREAMDB_PROT": "1"})
    cfg = tmp_path / "bad.toml"
    cfg.write_text("colour = 'red'\n")
    with pytest.raises(ConfigurationError, match="unknown setting 'colour'"):
        load_settings({}, config_file=str(cfg), environ={})
    with pytest.raises(ConfigurationError, match="port"):
        load_settings({"port": 70000}, environ={})
    with pytest.raises(ConfigurationError, match="spark_master"):
        load_settings({"spark_master": "mesos://x"}, environ={})
    cfg.write_text("port = \n")
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        load_settings({}, config_file=str(cfg), environ={})


def test_cli_reports_bad_configuration_and_exits_2():
    out = subprocess.run([sys.executable, "-m", "streamdb.cli", "serve", "--port", "99999"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "port" in out.stderr
