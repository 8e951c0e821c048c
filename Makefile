# The two commands the README gives: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-data
# TensorFlow's start-up chatter off (shared/reference/dependencies.md)
export TF_CPP_MIN_LOG_LEVEL := 2
export TF_ENABLE_ONEDNN_OPTS := 0

.PHONY: demo test install wordnet clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,torch,tf,vtab]'
	touch $(STAMP)

install: $(STAMP)

# WordNet 3.0 from Debian, where apt is available: tests then rebuild the shipped
# derived file from it and compare. Without it they use the shipped file.
wordnet:
	@if [ ! -f /usr/share/wordnet/data.noun ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq wordnet-base >/dev/null) || echo "wordnet-base not installed; tests use the shipped WordNet file"; \
	fi

test: install wordnet
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/sampler-server demo --workdir $(DEMO_DIR)

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
