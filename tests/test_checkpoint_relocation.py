"""A data directory restored elsewhere: Spark's operator metadata names state schema files by
absolute path, and relocate_checkpoint points them at the checkpoint's own place."""

from __future__ import annotations

import json
from pathlib import Path

from streamdb.runtime.spark.pipeline import relocate_checkpoint


def _metadata(schema_paths: list[str]) -> str:
    doc = {"operatorInfo": {"operatorId": 0, "operatorName": "transformWithStateExec"},
           "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 2,
                               "stateSchemaFilePaths": schema_paths}],
           "operatorPropertiesJson": "{}"}
    return "v2\n" + json.dumps(doc, separators=(",", ":"))


def test_schema_paths_follow_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "restored" / "spark" / "pipelines" / "depth-1"
    meta_dir = checkpoint / "state" / "0" / "_metadata" / "v2"
    meta_dir.mkdir(parents=True)
    old = "file:/gone/data/spark/pipelines/depth-1/state/0/_stateSchema/default/0_abc"
    (meta_dir / "0").write_text(_metadata([old]))
    (meta_dir / ".0.crc").write_bytes(b"old checksum")

    assert relocate_checkpoint(checkpoint) == 1
    lines = (meta_dir / "0").read_text().split("\n")
    assert lines[0] == "v2"
    paths = json.loads(lines[1])["stateStoreInfo"][0]["stateSchemaFilePaths"]
    assert paths == [f"file:{checkpoint.absolute()}/state/0/_stateSchema/default/0_abc"]
    assert not (meta_dir / ".0.crc").exists()  # the old text's checksum would fail the read
    assert relocate_checkpoint(checkpoint) == 0  # in place now: nothing to rewrite


def test_a_checkpoint_in_place_is_left_alone(tmp_path: Path) -> None:
    checkpoint = tmp_path / "depth-0"
    meta_dir = checkpoint / "state" / "0" / "_metadata" / "v2"
    meta_dir.mkdir(parents=True)
    text = _metadata([f"file:{checkpoint.absolute()}/state/0/_stateSchema/default/0_x"])
    (meta_dir / "3").write_text(text)
    assert relocate_checkpoint(checkpoint) == 0
    assert (meta_dir / "3").read_text() == text
    assert relocate_checkpoint(tmp_path / "no-checkpoint-yet") == 0


def test_metadata_it_cannot_read_is_left_to_spark(tmp_path: Path) -> None:
    meta_dir = tmp_path / "depth-1" / "state" / "0" / "_metadata" / "v2"
    meta_dir.mkdir(parents=True)
    (meta_dir / "0").write_text('v2\n{"stateSchemaFilePaths": [truncated')
    assert relocate_checkpoint(tmp_path / "depth-1") == 0
    assert (meta_dir / "0").read_text() == 'v2\n{"stateSchemaFilePaths": [truncated'
