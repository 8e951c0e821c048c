# The two commands the README gives: `make demo` and `make test` (and `make proto` after a .proto change).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-data
# TensorFlow's start-up chatter off (shared/reference/dependencies.md)
export TF_CPP_MIN_LOG_LEVEL := 2
export TF_ENABLE_ONEDNN_OPTS := 0

.PHONY: demo test check durations install bytecode proto wordnet postgresql chromium clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[server,dev,torch,tf,vtab,postgres,evaluate]'
	touch $(STAMP)

install: $(STAMP)

# The packages' bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (as on our
# CI machines) every process would compile them again from source, 0.3 s of each
# `serve`'s start-up (bench/README.md, "Scale"). Only stale files are compiled.
bytecode: install
	$(BIN)/python -m compileall -q -j 0 sampler_server clients sampler_common

# WordNet 3.0 from Debian, where apt is available: tests then rebuild the shipped
# derived file from it and compare. Without it they use the shipped file.
wordnet:
	@if [ ! -f /usr/share/wordnet/data.noun ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq wordnet-base >/dev/null) || echo "wordnet-base not installed; tests use the shipped WordNet file"; \
	fi

# PostgreSQL from Debian, where apt is available: the metrics tests start a real one
# (initdb and pg_ctl in a temporary folder). Without it they fail, unless
# SAMPLER_TESTS_WITHOUT_POSTGRES=1 says to skip them.
postgresql:
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		&& command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
		|| echo "postgresql not installed; the PostgreSQL metrics tests fail (SAMPLER_TESTS_WITHOUT_POSTGRES=1 skips them)"; \
	fi

# Chromium from Debian, where apt is available: the report card's test renders its HTML
# in headless Chromium and checks the screenshot. Without it that test fails, unless
# SAMPLER_TESTS_WITHOUT_CHROMIUM=1 says to skip it.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		fi; \
		command -v chromium >/dev/null 2>&1 \
		|| echo "chromium not installed; the report card's browser test fails (SAMPLER_TESTS_WITHOUT_CHROMIUM=1 skips it)"; \
	fi

# The suite in TEST_WORKERS processes (pytest-xdist), each taking a whole test file at a
# time, so a file's module fixtures (servers, packed stores) are built once. Tests marked
# `timing` compare wall-clock times with a bound: they run after, alone, from the files
# TIMING_TESTS names (tests/test_makefile.py keeps the list whole).
# Budgets on this 2-core machine: `make test` 12:00 of pytest, `make check` 3:00. `make
# durations` records each file's seconds and each part's wall clock in tests/durations.json,
# which tests/test_makefile.py holds to them. Measured idle, fresh clone (2026-11-30, 5643c3d, a
# 2-core Xeon with AVX-512): `make test` 8:53 + 0:50 (533.4 + 49.8 s = 583.2 s of pytest; 2,429
# passed, 6 skipped; 11:41 with the install); in this tree with the learners' tests: 561.4 + 51.1 s;
# `make check` 1:31 (91.4 s). The same suite took 737.7 + 61.6 s on the previous machine (1,443 s of
# CPU there, 1,043 s here): both cores stay busy through the parallel part, so it grows with the
# tests' work, not with their number (three workers were slower than two there).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest
PARALLEL := -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
TIMING_TESTS := tests/bench/test_scale_growth.py tests/clients/test_connection_mismatch.py \
	tests/clients/test_failures_say_what_to_do.py tests/core/cog/test_cog_levels.py tests/service/test_admission.py
test: install bytecode wordnet postgresql chromium
	$(PYTEST) $(PARALLEL) -m "not timing" --durations=30
	$(PYTEST) -q -m timing --durations=5 $(TIMING_TESTS)

# The fast tier, to run after every change: the server, the samplers, the stores and the
# command line, without TensorFlow, PyTorch or the trainers (selected by path, so no file that
# imports a framework is even collected; tests/test_makefile.py checks that), with a tenth of
# each property's Hypothesis examples. `make test` runs all of it again, in full.
CHECK_TESTS := tests/test_*.py tests/assembly tests/catalog tests/common tests/core tests/metrics tests/pack \
	tests/service tests/store tests/wire tests/cli tests/clients/test_md_learner_heads.py
CHECK_IGNORE := tests/core/vtab/test_vtab_labels_tf.py tests/core/vtab/test_vtab_slicing_tfds.py \
	tests/cli/test_demo_cog.py tests/cli/test_demo_evaluate.py tests/cli/test_demo_parity.py tests/cli/test_demo_vtab.py \
	tests/cli/test_demo_output.py tests/cli/test_pack_inspect_hints.py tests/cli/test_regime_cli.py \
	tests/cli/test_vtab_cli.py tests/metrics/test_calibrated_served.py tests/pack/test_vtab_pack.py \
	tests/service/test_regimes_service.py tests/service/test_same_host.py tests/service/test_source_regimes.py \
	tests/service/test_vtab_service.py
CHECK_MARKS := -m "not slow and not timing"
check: install bytecode wordnet
	HYPOTHESIS_PROFILE=check $(PYTEST) $(PARALLEL) $(CHECK_MARKS) $(addprefix --ignore=,$(CHECK_IGNORE)) $(CHECK_TESTS)

# Measure the suite's durations into tests/durations.json (tests/durations.py): each part of
# `make test` and `make check` whole (each part measured even when an earlier one failed), or
# with FILES=..., only those files (as the parallel part runs them), merged into the record.
DURATIONS := SAMPLER_TESTS_DURATIONS=$(CURDIR)/tests/durations.json
durations: install bytecode wordnet postgresql chromium
ifdef FILES
	$(DURATIONS) $(PYTEST) $(PARALLEL) -m "not timing" $(FILES)
else
	-$(DURATIONS) SAMPLER_TESTS_PART=test-parallel SAMPLER_TESTS_WALL=1 $(PYTEST) $(PARALLEL) -m "not timing"
	-$(DURATIONS) SAMPLER_TESTS_PART=test-timing SAMPLER_TESTS_WALL=1 $(PYTEST) -q -m timing $(TIMING_TESTS)
	-$(DURATIONS) SAMPLER_TESTS_PART=check SAMPLER_TESTS_WALL=1 HYPOTHESIS_PROFILE=check $(PYTEST) $(PARALLEL) \
		$(CHECK_MARKS) $(addprefix --ignore=,$(CHECK_IGNORE)) $(CHECK_TESTS)
endif

# Regenerate sampler_common/wire/gen from protos/ after a .proto change (commit the result;
# tests/wire/test_codegen.py fails while it is stale).
proto: install
	$(BIN)/python tools/codegen.py

demo: install bytecode
	$(BIN)/sampler-server demo --workdir $(DEMO_DIR)

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
