"""Fault-injection drivers shared by the test suite and `make soak` (tests/faults/soak.py)."""
