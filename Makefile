# The README's commands. Everything installs into .venv from PyPI.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test unit integration lint bench bench-large bench-peers docs clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[local,test,bench]"
	touch $(STAMP)

## demo: start a real local ClickHouse and S3, write sample data, run the example DAG through Airflow, print the load
demo: venv
	$(VENV)/bin/s3ch-local demo --dags-folder example_dags --workload-memory 8Gi

## test: the whole suite (unit, integration on the real local stack, the example DAG through Airflow)
test: venv
	$(PY) -m pytest -q -p no:cacheprovider

## lint: ruff (rules in pyproject.toml)
lint: venv
	$(VENV)/bin/ruff check .

unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

integration: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/dags

## docs: the documentation site (mkdocs.yml) into site/; --strict fails on any warning, a broken link included
DOCS_STAMP := $(VENV)/.docs-installed

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[docs]"
	touch $(DOCS_STAMP)

## bench: the benchmark harness (bench/README.md)
bench: venv
	$(PY) -m bench.run

## bench-large: the benchmark, the 100 000-object listing (~4 min) and 3.3 GB of Parquet with merge pressure (~8 min, bench/large.py)
bench-large: venv
	$(PY) -m bench.run --large

## bench-peers: the end-to-end section with dlt's ClickHouse destination as a third peer (dlt in its own
## venv .venv-dlt, apart from the provider's dependencies; ~6 min, writes bench/results/end_to_end.json)
DLT_VENV := .venv-dlt

bench-peers: venv $(DLT_VENV)/.installed
	S3CH_DLT_PYTHON=$(DLT_VENV)/bin/python $(PY) -m bench.run --only end_to_end --out bench/results

$(DLT_VENV)/.installed:
	$(PYTHON) -m venv $(DLT_VENV)
	$(DLT_VENV)/bin/pip install --quiet --disable-pip-version-check "dlt[clickhouse,parquet,s3]" duckdb pandas
	touch $(DLT_VENV)/.installed

clean:
	rm -rf $(VENV) $(DLT_VENV) build *.egg-info .pytest_cache site
