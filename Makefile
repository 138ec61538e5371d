# Two commands on a fresh machine (Python 3.11, Java 17, Maven; as root the rest installs itself):
#   make test    install everything (Python packages, Kafka's jars, Apicurio Registry, PostgreSQL, Redis, headless
#                Chromium), then run the whole suite against real services the tests start themselves (Apache Kafka,
#                PostgreSQL, Spark, Apicurio Registry)
#   make demo    install, start an embedded Apache Kafka, produce a sample stream, run the example DAG
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install jars postgres redis browser test demo bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Apache Kafka's jars (the embedded broker), Spark's Kafka source (the benchmark's anchor) and Apicurio Registry's
# distribution (the tests' schema registry), from Maven Central
jars: $(VENV)/.installed
	$(PY) -m ingest_core.dev.jars

# pydruid's SQLAlchemy dialect as Superset uses it needs SQLAlchemy 1.4 (Superset's pin; the project runs on 2.x):
# a virtualenv of its own, run as a subprocess by tests/system/test_permissions.py
DRUID_CLIENT_VENV ?= .venv-druid-client
$(DRUID_CLIENT_VENV)/.installed: Makefile
	python3 -m venv $(DRUID_CLIENT_VENV)
	$(DRUID_CLIENT_VENV)/bin/python -m pip install --quiet 'pydruid[sqlalchemy]==0.6.9' 'sqlalchemy>=1.4,<2'
	touch $@

install: $(VENV)/.installed jars $(DRUID_CLIENT_VENV)/.installed

# the tests start a private PostgreSQL server from Debian's binaries (unless INGEST_TEST_POSTGRES names one)
postgres:
	@[ -n "$$INGEST_TEST_POSTGRES" ] || command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || \
	  { echo "the tests need PostgreSQL's server binaries: apt-get install postgresql" >&2; exit 1; }

# the CeleryExecutor test starts its own Redis server (Debian's redis-server binary; not the system service) as
# Celery's broker
redis:
	@command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || \
	  { echo "the Celery test needs Redis: apt-get install redis-server" >&2; exit 1; }

# the UI screenshot test needs headless Chromium (a Debian package)
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  { echo "the UI tests need headless Chromium: apt-get install chromium" >&2; exit 1; }

test: install postgres redis browser
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install
	$(PY) -m ingest_core.dev.demo

# the real sizes, written out (each script's --tiny runs it on a few records: tests/system/test_benchmarks.py)
bench: install
	$(PY) benchmarks/plan_partitions.py --partitions 10000 --repeat 3 --naive-sample 200
	$(PY) benchmarks/plan_partitions.py --partitions 100000 --repeat 3 --naive-sample 200
	$(PY) benchmarks/ingest_job_throughput.py --records 1000000 4000000 --split 250000
	$(PY) benchmarks/ingest_job_throughput.py --records 1000000 --split 250000 --value-format avro
	$(PY) benchmarks/ingest_job_throughput.py --records 1000000 --split 250000 --value-format protobuf
	$(PY) benchmarks/ingest_job_throughput.py --records 1000000 --split 250000 --sketches
	$(PY) benchmarks/row_parser_formats.py
	$(PY) benchmarks/microbatch_fixed_cost.py --runs 5 --records 1000 --task-count 2 --scheduler-runs 3
	$(PY) benchmarks/freshness.py --rates 1000 5000 10000 --duration 600 --airflow-conf scheduler.scheduler_idle_sleep_time=0.2
	$(PY) benchmarks/fault_soak.py --iterations 16 --seed 1
	$(PY) benchmarks/fault_soak.py --scheduler --duration 600
	$(PY) benchmarks/fault_soak.py --scheduler --s3 --duration 600
	$(PY) benchmarks/fault_soak.py --scheduler --s3 --sasl --duration 600
	$(PY) benchmarks/connect_restart.py --s3 --jobs 4
	$(PY) benchmarks/compaction.py --minutes 1440 --rows 200
	$(PY) benchmarks/sketch_query.py --hours 24 --rows-per-hour 2000 --users-per-row 40
	$(PY) benchmarks/sql_isolation.py
	$(PY) benchmarks/history_retention.py --days 45 --airflow-runs-per-day 1728
	$(PY) benchmarks/dag_parse.py --specs 10 50 200
	$(PY) benchmarks/fleet.py --datasources 10 50 200 --executor local celery --case-seconds 180

clean:
	rm -rf $(VENV) $(DRUID_CLIENT_VENV) .ingest-home .jars
