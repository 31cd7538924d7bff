"""Runs a source for every external stream in the catalog (started at boot and after DDL)."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from streamdb.catalog import CatalogSnapshot, RelationDef
from streamdb.errors import ConfigurationError, StreamDBError
from streamdb.planner.connectors import mask_text, refuse_file_properties
from streamdb.runtime.connectors.decode import Decoder, SchemaRegistry
from streamdb.runtime.connectors.kafka_source import KafkaSource
from streamdb.runtime.connectors.source_base import SourceStatus

if TYPE_CHECKING:
    from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb.sources")


class SourceManager:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sources: dict[int, Any] = {}  # external stream id -> KafkaSource | FileSource
        self.failed: dict[int, str] = {}  # external stream id -> why its source could not start

    def status(self, rel_id: int) -> SourceStatus | None:
        source = self.sources.get(rel_id)
        return source.status if source is not None else None

    def sync(self) -> None:
        """Start sources for new external streams, stop those of dropped ones."""
        catalog = self.engine.catalog.snapshot()
        wanted = {r.id: r for r in catalog.relations.values() if dict(r.extra).get("external")}
        for rel_id in [i for i in self.sources if i not in wanted]:
            dropped = self.sources.pop(rel_id)
            dropped.stop()
            dropped.dropped()
        for rel_id in [i for i in self.failed if i not in wanted]:
            del self.failed[rel_id]
        for rel_id, rel in wanted.items():
            if rel_id in self.sources:
                continue
            try:
                source = self._source(rel, catalog)
            except StreamDBError as e:
                self.failed[rel_id] = e.message
                log.error("source of %s cannot start: %s", rel.name, e.message)
                continue
            self.failed.pop(rel_id, None)
            self.sources[rel_id] = source
            source.start_thread()

    def stop(self) -> None:
        for source in self.sources.values():
            source.stop()
        self.sources.clear()

    def _source(self, rel: RelationDef, catalog: CatalogSnapshot) -> Any:
        extra = dict(rel.extra)
        opts = dict(rel.options)
        errors_rel = catalog.get(str(extra.get("dead_letters")))
        conn = catalog.object_by_id(rel.depends_on[0]) if rel.depends_on else None
        conn_opts = dict(conn.options) if conn is not None else {}
        decoder = Decoder(rel, value_format=rel.value_format, key_format=opts.get("key_format") or "text",
                          csv_delimiter=opts.get("csv_delimiter") or ",",
                          max_record_bytes=int(opts.get("max_record_bytes") or (1 << 20)),
                          avro_schema=_avro_schema(opts.get("avro_schema")),
                          schema_registry=SchemaRegistry(opts["schema_registry_url"])
                          if opts.get("schema_registry_url") else None)
        if extra.get("external") == "file":
            from streamdb.runtime.connectors.file_source import FileSource

            root = self.engine.file_root()
            return FileSource(self.engine, rel, errors_rel, root, conn_opts["path"], opts.get("pattern"), decoder)
        if extra.get("external") == "postgres":
            from streamdb.runtime.connectors.pg_cdc_source import PostgresCdcSource

            return PostgresCdcSource(self.engine, rel, decoder, dsn=conn_opts["dsn"], table=opts["postgres_table"],
                                     publication=opts.get("publication"))
        if extra.get("external") == "mqtt":
            return self._mqtt_source(rel, errors_rel, opts, conn_opts, decoder)
        bootstrap = (conn_opts.get("bootstrap_servers") or opts.get("bootstrap_servers")
                     or self.engine.settings.kafka_bootstrap)
        if not bootstrap:
            raise ConfigurationError(f'external stream "{rel.name}" names no connector and the server has no '
                                     "kafka_bootstrap setting")
        props = {k: v for k, v in conn_opts.items() if "." in k}
        if not self.engine.settings.allow_kafka_file_properties:
            refuse_file_properties(props)
        conf = {**props, "bootstrap.servers": bootstrap, "group.id": f"streamdb-{rel.id}",
                "enable.auto.commit": False, "enable.partition.eof": False, "client.id": f"streamdb-{rel.name}",
                "logger": _KafkaLog(rel.name)}
        return KafkaSource(self.engine, rel, errors_rel, str(opts["kafka_topic"]), conf, decoder,
                           start=opts.get("scan_startup") or "earliest")

    def _mqtt_source(self, rel: RelationDef, errors_rel: RelationDef | None, opts: dict[str, str],
                     conn_opts: dict[str, str], decoder: Decoder) -> Any:
        from streamdb.planner.connectors import mqtt_broker
        from streamdb.runtime.connectors.mqtt_source import MqttSource

        host, port, tls = mqtt_broker(conn_opts.get("broker") or opts["mqtt_broker"])
        # One session per stream, the same across restarts (the broker keeps a QoS 1 session's
        # messages while StreamDB is down) and renames, distinct for a stream created again.
        tag = hashlib.sha1(f"{rel.id}/{rel.created_at!r}".encode()).hexdigest()[:8]
        client_id = f"{conn_opts.get('client_id') or 'streamdb'}-{rel.id}-{tag}"
        return MqttSource(self.engine, rel, errors_rel, decoder, host=host, port=port, tls=tls,
                          topic=opts["mqtt_topic"], qos=int(opts["qos"]), client_id=client_id,
                          username=conn_opts.get("username"), password=conn_opts.get("password"))


def _avro_schema(text: str | None) -> Any:
    if not text:
        return None
    import fastavro

    return fastavro.parse_schema(json.loads(text))


class _KafkaLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """librdkafka's log lines through our logger, passwords masked."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.getLogger("streamdb.kafka"), {"source": name})

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return mask_text(str(msg)), kwargs
