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


def test_spark_conf_from_file_and_environment(tmp_path: Path):
    cfg = tmp_path / "streamdb.toml"
    cfg.write_text('[spark_conf]\n"spark.executor.memory" = "4g"\n"spark.sql.shuffle.partitions" = 8\n'
                   '"spark.sql.streaming.checkpoint.fileChecksum.enabled" = false\n')
    s = load_settings({}, config_file=str(cfg), environ={})
    assert s.spark_conf == {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": "8",
                            "spark.sql.streaming.checkpoint.fileChecksum.enabled": "false"}
    s = load_settings({}, environ={"STREAMDB_SPARK_CONF": '{"spark.executor.cores": 2}'})
    assert s.spark_conf == {"spark.executor.cores": "2"}
    assert load_settings({}, environ={}).spark_conf == {}


def test_spark_conf_is_checked(tmp_path: Path):
    with pytest.raises(ConfigurationError, match="'executor.memory' is not a Spark setting"):
        load_settings({}, environ={"STREAMDB_SPARK_CONF": '{"executor.memory": "4g"}'})
    with pytest.raises(ConfigurationError, match="spark_conf: .*JSON object"):
        load_settings({}, environ={"STREAMDB_SPARK_CONF": "spark.executor.memory=4g"})
    cfg = tmp_path / "bad.toml"
    cfg.write_text('spark_conf = ["spark.executor.memory"]\n')
    with pytest.raises(ConfigurationError, match="spark_conf: .*table of Spark settings"):
        load_settings({}, config_file=str(cfg), environ={})


def test_spark_conf_reaches_spark_and_wins(tmp_path: Path):
    from streamdb.runtime.spark.session import SparkRuntime

    conf = load_settings({}, environ={"STREAMDB_SPARK_CONF": '{"spark.sql.adaptive.enabled": "false", '
                                      '"spark.executor.memory": "3g"}'}).spark_conf
    runtime = SparkRuntime("local[2]", work_dir=str(tmp_path), conf=conf)
    spark_conf = runtime.spark_conf()
    assert spark_conf["spark.sql.adaptive.enabled"] == "false"  # StreamDB's own default is "true"
    assert spark_conf["spark.executor.memory"] == "3g"


def test_ad_hoc_queries_ship_spark_at_most_a_quarter_of_its_driver_heap(tmp_path: Path):
    """Inputs over the limit are answered by the embedded engine (runtime/query.py): a 9.2M-row
    view shipped to Spark ran its 1 GiB heap out (Nexmark q0 at 10M events)."""
    from streamdb.runtime.spark.session import SparkRuntime, _size_bytes

    assert [_size_bytes(t) for t in ("1g", "512m", "2048k", "1.5g", "4096", "2G", "1gb")] == \
        [1 << 30, 512 << 20, 2 << 20, 3 << 29, 4096, 2 << 30, 1 << 30]
    assert SparkRuntime("local[2]", work_dir=str(tmp_path)).max_input_bytes() == 192 << 20  # of the default 768m
    bigger = SparkRuntime("local[2]", work_dir=str(tmp_path), conf={"spark.driver.memory": "4g"})
    assert bigger.max_input_bytes() == 1 << 30
