# StreamDB: `make serve` runs the server, `make test` runs the whole suite. Both set everything up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve test test-fast lint typecheck slt bench bench-quick soak clean

install: $(STAMP)
	@scripts/ensure-java.sh
	@$(BIN)/python -c "from streamdb.runtime.spark.jvm import jar_path; jar_path()"
	@$(BIN)/python -m streamdb.runtime.spark.cds

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "StreamDB needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $(STAMP)

serve: install
	$(BIN)/streamdb serve

test: install
	@scripts/ensure-psql.sh
	@scripts/ensure-jdbc.sh
	@scripts/ensure-node-deps.sh
	@scripts/ensure-chromium.sh
	@scripts/ensure-mosquitto.sh
	$(BIN)/ruff check streamdb tests bench
	$(BIN)/mypy streamdb
	$(BIN)/python -m pytest -q -ra --durations=25

test-fast: install
	$(BIN)/python -m pytest -q -ra -m "not slow"

lint: install
	$(BIN)/ruff check streamdb tests bench
	$(BIN)/mypy streamdb

# Fault soak (not part of `make test`): 50 kill -9 cycles under continuous writes, a real full disk
# (tmpfs, when mount works) and, once tests/fuzz/wire_fuzz.py exists, 100,000 wire fuzz cases;
# figures in test-artifacts/soak.json (tests/faults/soak.py).
soak: install
	$(BIN)/python -m tests.faults.soak --cycles 50 --fuzz-cases 100000

# Conformance report over RisingWave's sqllogictest files (not part of `make test`).
slt: install
	scripts/run-slt.sh

# Benchmarks vs Flink and PostgreSQL (docs/benchmarks.md); matplotlib only here, not for `make test`.
bench: install
	@scripts/ensure-psql.sh
	@$(BIN)/python -c 'import matplotlib' 2>/dev/null || $(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py

bench-quick: install
	@scripts/ensure-psql.sh
	@$(BIN)/python -c 'import matplotlib' 2>/dev/null || $(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py --quick

clean:
	rm -rf $(VENV) streamdb-data .pytest_cache .ruff_cache .mypy_cache
