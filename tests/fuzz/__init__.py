"""Fuzzers for the wire protocol and the SQL dialect (usable from pytest and as CLIs)."""
