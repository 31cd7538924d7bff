"""Connectors: sources that bring records in (Kafka topics, files) and sinks that deliver changes."""
