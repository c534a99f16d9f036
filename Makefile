# The README's commands. Everything installs into .venv from PyPI, pinned by a checked-in constraints file
# (one per Airflow x Python version tested, frozen from a venv that passed `make test`), so that a fresh
# clone builds what CI tested. `make venv AIRFLOW_VERSION=<version>` builds another tested Airflow's set in
# .venv-airflow-<version>.
PYTHON ?= python3
AIRFLOW_VERSION ?= 3.3.2
PY_VERSION  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CONSTRAINTS ?= constraints/constraints-$(AIRFLOW_VERSION)-python$(PY_VERSION).txt
VENV   ?= $(if $(filter 3.3.2,$(AIRFLOW_VERSION)),.venv,.venv-airflow-$(AIRFLOW_VERSION))
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check --constraint $(CONSTRAINTS)

.PHONY: venv demo live test test-airflow unit integration ledger-histories ledger-histories-cluster ledger-histories-views cluster-kills view-kills lint bench bench-large bench-peers docs constraints airflow-check clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) "apache-airflow==$(AIRFLOW_VERSION)" -e ".[local,test,bench]"
	touch $(STAMP)

$(CONSTRAINTS):
	@echo "no constraints for Airflow $(AIRFLOW_VERSION) on Python $(PY_VERSION) ($(CONSTRAINTS)): the tested sets" \
	  "are in constraints/. To add one (docs/airflow-versions.md): make venv AIRFLOW_VERSION=$(AIRFLOW_VERSION)" \
	  "CONSTRAINTS=<Airflow's release-day set>, make test (same arguments), then make constraints" \
	  "AIRFLOW_VERSION=$(AIRFLOW_VERSION)" >&2
	@exit 1

## constraints: freeze the venv (after it passed make test, and make docs for the docs' packages) as the constraints
## of its Airflow and Python versions
constraints:
	{ echo "# Constraints for make venv: Apache Airflow $(AIRFLOW_VERSION) on Python $(PY_VERSION), frozen from a venv that passed make test"; \
	  echo "# or make airflow-check; Airflow's own dependencies as on its release day (docs/airflow-versions.md)."; \
	  echo "# Regenerate with: make constraints AIRFLOW_VERSION=$(AIRFLOW_VERSION), from a venv that passed."; \
	  $(PY) -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^airflow-provider-s3ch'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

## demo: start a real local ClickHouse and S3, write sample data, run the example DAG through Airflow, print the load
demo: venv
	$(VENV)/bin/s3ch-local demo --dags-folder example_dags --workload-memory 8Gi

## live: continuous ingestion on the local stack with Airflow's own scheduler, triggerer and dag-processor: a file put
## each second for LIVE_SECONDS (60), the rows, files and lag printed, then the put -> readable latency (p50, p95).
## LIVE_SQS=no: the listing watcher alone, no SQS notifications (--no-sqs); LIVE_POLL: the listing watcher's seconds
## between two looks (10; beside SQS it is the backstop); LIVE_ARGS: more of the command's arguments
## (s3ch-local live --help), e.g. make live LIVE_SQS=no LIVE_POLL=5 LIVE_ARGS="--interval 0.5".
## Ctrl-C at any point stops every process it started (Airflow's, ClickHouse, S3) before it says so
LIVE_SECONDS ?= 60
LIVE_SQS ?= yes
LIVE_POLL ?= 10
LIVE_ARGS ?=

live: venv
	@$(if $(filter-out yes no,$(LIVE_SQS)),echo "LIVE_SQS is yes or no; it is '$(LIVE_SQS)'" >&2; exit 2,true)
	$(VENV)/bin/s3ch-local live --seconds $(LIVE_SECONDS) --listing-poll $(LIVE_POLL) \
	  $(if $(filter no,$(LIVE_SQS)),--no-sqs) --dag-file example_dags/example_continuous.py $(LIVE_ARGS)

## The suite runs in TEST_WORKERS processes (pytest-xdist), each test module whole in one of them (--dist loadfile:
## a module's fixtures are set up once), each process with its own servers and Airflow home. Most of the suite's
## time is waiting on servers and Airflow's processes, so it runs faster in parallel even on 2 cores; TEST_WORKERS=0
## runs it in one process
TEST_WORKERS ?= 3
PYTEST_PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

## test: the whole suite (unit, integration on the real local stack, the example DAG through Airflow)
test: venv
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL)

## test-airflow: the part of the suite that goes through Airflow (operator, sensor, triggers, connections, lineage,
## compat, the DAGs through `airflow dags test`, the scheduler), for another Airflow version: make test-airflow
## AIRFLOW_VERSION=2.11.2. The pure core and the load path are the same code on every Airflow; make test runs them
## (tests/conftest.py lists those modules, each with its reason)
test-airflow: venv
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) -m "not airflow_independent"

## ledger-histories: the ledger against its model over LEDGER_HISTORIES histories (500 by default; make test runs 20),
## each up to 8 steps with loads SIGKILLed at random statements; the counts go to bench/results/ledger_histories.json
LEDGER_HISTORIES ?= 500

ledger-histories: venv
	S3CH_LEDGER_HISTORIES=$(LEDGER_HISTORIES) S3CH_LEDGER_HISTORIES_REPORT=bench/results/ledger_histories.json \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/integration/test_ledger_model.py

## ledger-histories-cluster: the ledger against its model on the local 3-node cluster (a Distributed table, nodes
## SIGKILLed at random statements) over CLUSTER_HISTORIES histories (120 by default; make test runs 6); the counts go
## to bench/results/ledger_histories_cluster.json
CLUSTER_HISTORIES ?= 120

ledger-histories-cluster: venv
	S3CH_CLUSTER_HISTORIES=$(CLUSTER_HISTORIES) S3CH_CLUSTER_HISTORIES_REPORT=bench/results/ledger_histories_cluster.json \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/integration/test_ledger_model_cluster.py

## ledger-histories-views: the ledger against its model into a table that two materialized views read, over
## VIEW_HISTORIES histories (210 by default; make test runs 6); the counts go to bench/results/ledger_histories_views.json
VIEW_HISTORIES ?= 210

ledger-histories-views: venv
	S3CH_LEDGER_VIEW_HISTORIES=$(VIEW_HISTORIES) S3CH_LEDGER_HISTORIES_REPORT=bench/results/ledger_histories_views.json \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/integration/test_ledger_model.py -k views

## view-kills: VIEW_KILLS loads into a table with a rollup view, a chain of two views and a view into another
## partition key (120 by default; make test runs 8), append, skip_loaded, replace_partitions and overwrite, the worker
## or the node SIGKILLed at a random statement and retried: every table as ClickHouse's own insert makes it; counts in
## bench/results/view_kills.json
VIEW_KILLS ?= 120

view-kills: venv
	S3CH_VIEW_KILLS=$(VIEW_KILLS) S3CH_VIEW_KILLS_REPORT=bench/results/view_kills.json \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/integration/test_views.py

## cluster-kills: CLUSTER_KILLS loads into a Distributed table on the local 3-node cluster (150 by default; make test
## runs 8), each SIGKILLed (the worker, the initiator node or another node) at a random statement and retried; every
## row once, no staging table left; the counts go to bench/results/cluster_kills.json
CLUSTER_KILLS ?= 150

cluster-kills: venv
	S3CH_CLUSTER_KILLS=$(CLUSTER_KILLS) S3CH_CLUSTER_KILLS_REPORT=bench/results/cluster_kills.json \
	  $(PY) -m pytest -q -p no:cacheprovider -s tests/integration/test_cluster_staging.py

## lint: ruff (rules in pyproject.toml)
lint: venv
	$(VENV)/bin/ruff check .

unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

integration: venv
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_PARALLEL) tests/integration tests/dags

## docs: the documentation site (mkdocs.yml) into site/; --strict fails on any warning, a broken link included
DOCS_STAMP := $(VENV)/.docs-installed

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

$(DOCS_STAMP): $(STAMP)
	$(PIP_INSTALL) -e ".[docs]"
	touch $(DOCS_STAMP)

## bench: the benchmark harness (bench/README.md)
bench: venv
	$(PY) -m bench.run

## bench-large: the benchmark, the 100 000-object listing (~4 min) and 3.3 GB of Parquet with merge pressure (~8 min,
## bench/large.py), then its memory/speed grid and the operator under 1, 2 and 4 GiB caps (~25 min, bench/large_grid.py)
bench-large: venv
	$(PY) -m bench.run --large --grid

## bench-peers: the end-to-end section with dlt's ClickHouse destination as a third peer (dlt in its own
## venv .venv-dlt, apart from the provider's dependencies; direct, 20 ms and 50 ms, three rounds: ~15 min, writes bench/results/end_to_end.json)
DLT_VENV := .venv-dlt

bench-peers: venv $(DLT_VENV)/.installed
	S3CH_DLT_PYTHON=$(DLT_VENV)/bin/python $(PY) -m bench.run --only end_to_end --out bench/results

$(DLT_VENV)/.installed:
	$(PYTHON) -m venv $(DLT_VENV)
	$(DLT_VENV)/bin/pip install --quiet --disable-pip-version-check "dlt[clickhouse,parquet,s3]" duckdb pandas
	touch $(DLT_VENV)/.installed

## bench-s3queue: ClickHouse's S3Queue engine beside the provider's continuous ingestion on LocalStack(keeper=True)
## (Debian's zookeeper package): latency at 26.9's polling defaults and tuned, idle gaps, SIGKILLs of the node,
## out-of-order keys, re-uploads, a parse error, throughput and S3 requests an hour; then the provider's side of the
## same fault scenarios through the live stream (bench.continuous_scenarios: Airflow's processes on the continuous
## example DAG, ~4 min), and its other figures read from its result files; then both on the same files at the aimed
## throughput sizes (bench.continuous_throughput: 10,000 small files, 1 GB; ~6 min) and the report again. Writes
## bench/results/continuous_compared.{json,md,png}, continuous_scenarios.json and continuous_throughput.json.
## S3QUEUE_ARGS, THROUGHPUT_ARGS: more arguments, e.g. make bench-s3queue S3QUEUE_ARGS=--quick
## THROUGHPUT_ARGS="--small-files 500 --large-mb 128" (~12 min on 2 cores)
S3QUEUE_ARGS ?=
THROUGHPUT_ARGS ?=

bench-s3queue: venv
	$(PY) -m bench.s3queue_peer --provider $(S3QUEUE_ARGS)
	$(PY) -m bench.continuous_throughput $(THROUGHPUT_ARGS)
	$(PY) -m bench.s3queue_peer --render-only

## airflow-check: what a user of one Airflow version (AIRFLOW_VERSION=...) sees: the provider listed, the DAGs
## through `airflow dags test` (CSV and Parquet, the sensor, a deferrable load), and the demo's load
airflow-check: venv
	AIRFLOW_HOME=$$(mktemp -d) $(VENV)/bin/airflow providers list | grep -F airflow-provider-s3ch
	$(PY) -m pytest -q -p no:cacheprovider tests/dags
	$(VENV)/bin/s3ch-local demo --dags-folder example_dags --workload-memory 8Gi

clean:
	rm -rf $(VENV) $(DLT_VENV) build *.egg-info .pytest_cache site
