# Two commands on a fresh machine (Python 3.11, Java 17, PostgreSQL on 127.0.0.1:5432):
#   make test    install everything into .venv, then run the whole suite against real services
#   make demo    install, start an embedded broker, produce a sample stream, plan microbatches
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install test demo bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(PY) -m ingest_core.demo

bench: install
	$(PY) benchmarks/plan_10k_partitions.py
	$(PY) benchmarks/ingest_job_throughput.py

clean:
	rm -rf $(VENV) .ingest-home
