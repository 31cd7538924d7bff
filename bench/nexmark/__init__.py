"""Nexmark benchmark: a deterministic event generator, the queries in StreamDB's dialect and a runner."""
