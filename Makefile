# Two commands on a fresh machine (Python 3.11, Java 17, PostgreSQL on 127.0.0.1:5432):
#   make test    install everything into .venv (and headless Chromium), then run the whole suite against real services
#   make demo    install, start an embedded broker, produce a sample stream, plan microbatches
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install browser test demo bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# the UI screenshot test needs headless Chromium (a Debian package)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  { echo "the UI tests need headless Chromium: apt-get install chromium" >&2; exit 1; }

test: install browser
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(PY) -m ingest_core.demo

bench: install
	$(PY) benchmarks/plan_10k_partitions.py
	$(PY) benchmarks/ingest_job_throughput.py

clean:
	rm -rf $(VENV) .ingest-home
