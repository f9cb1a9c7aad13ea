# The two commands of the README: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test bench bench-compaction fuzz chaos lint system-deps clean clean-data

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

## Install into .venv and start the embedded gateway on 127.0.0.1:9092.
serve: $(VENV)/.installed
	$(BIN)/tidegate serve

## Debian packages the tests drive (kcat, zookeeper), installed when missing and root.
system-deps:
	./scripts/system-deps.sh

## Install what the tests need and run the whole suite through tox.
test: system-deps | $(BIN)/python
	$(BIN)/python -m pip install -q "tox>=4.11"
	$(BIN)/tox

## Benchmarks against the peer broker and the machine's limits.
bench: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[bench]"
	$(BIN)/python -m bench.run $(BENCH_ARGS)

## Schema-driven request fuzzer against a fresh `tidegate serve`; the last line has the
## count and the result (FUZZ_FRAMES, FUZZ_SEED).
FUZZ_FRAMES ?= 1000000
FUZZ_SEED ?= 1
fuzz: $(VENV)/.installed
	$(BIN)/python scripts/fuzz.py --frames $(FUZZ_FRAMES) --seed $(FUZZ_SEED)

## Cleaning throughput of compacted topics and produce latency while the cleaner runs.
bench-compaction: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[bench]"
	$(BIN)/python -m bench.compaction $(BENCH_ARGS)

## The fault campaign against three nodes (docs/cluster.md): CHAOS_FAULTS seeded faults
## (CHAOS_SEED, more flags in CHAOS_ARGS); prints a report, fails on any violation.
CHAOS_FAULTS ?= 50
CHAOS_SEED ?= 1
chaos: system-deps $(VENV)/.installed
	$(BIN)/python -m pip install -q "confluent-kafka>=2.3"
	$(BIN)/python -m tests.cluster.chaos --seed $(CHAOS_SEED) --faults $(CHAOS_FAULTS) $(CHAOS_ARGS)

lint: | $(BIN)/python
	$(BIN)/python -m pip install -q "tox>=4.11"
	$(BIN)/tox -e lint

## Remove the virtualenv and tox environments; the data directory is kept.
clean:
	@echo "removing $(VENV)/ and .tox/"
	rm -rf $(VENV) .tox
	@if [ -e tidegate-data ]; then echo "kept tidegate-data/, the default data directory (its topics, records and offsets): 'make clean-data' deletes it"; fi

## Delete the default data directory: every topic, record and consumer offset in it.
clean-data:
	@echo "deleting tidegate-data/: every topic, record and consumer offset of the default data directory"
	rm -rf tidegate-data
