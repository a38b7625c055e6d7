# Every target installs what it needs on first use (.venv, Python packages, Spark jars) and is
# fast the second time. State lives in project-local folders, all ignored by git.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
JARS_READY := .jars/.ready

export AIRFLOW_HOME := $(CURDIR)/.airflow
export AIRFLOW_ICEBERG_DML_HOME := $(CURDIR)/.iceberg
export AIRFLOW_ICEBERG_DML_JAR_CACHE := $(CURDIR)/.jars
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export AIRFLOW__CORE__UNIT_TEST_MODE := False

.PHONY: demo example example-name test lint bench install jars clean engine engine-status engine-stop check-floor

install: $(INSTALLED)

$(INSTALLED): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,bench]'
	@# The build leaves an egg-info here; a process started in this folder would see the package's
	@# entry points twice, and Airflow's task SDK stops loading plugins at a duplicate (plugin.py).
	rm -rf airflow_iceberg_dml.egg-info
	touch $@

jars: $(JARS_READY)

$(JARS_READY): $(INSTALLED) airflow_iceberg_dml/runtime.py
	$(BIN)/python -m airflow_iceberg_dml.runtime fetch
	touch $@

$(AIRFLOW_HOME)/.migrated: $(INSTALLED)
	mkdir -p $(AIRFLOW_HOME)
	$(BIN)/airflow db migrate > $(AIRFLOW_HOME)/migrate.log 2>&1 || (tail -20 $(AIRFLOW_HOME)/migrate.log; exit 1)
	touch $@

# The quickstart twice: a Spark application per task, then the same tasks over the warm engine.
demo: $(JARS_READY) $(AIRFLOW_HOME)/.migrated
	$(BIN)/python dags/iceberg_dml_quickstart.py --compare-engines

# One example DAG of dags/ run once on the embedded default, as its file's demo runs it (the DAGs that
# have one): make example DAG=iceberg_quality_remediation
example: example-name $(JARS_READY) $(AIRFLOW_HOME)/.migrated
	$(BIN)/python dags/$(DAG).py

example-name:
	@grep -qs '__name__ == "__main__"' dags/$(DAG).py || { echo "Usage: make example DAG=<name>, one of:" \
		$$(grep -ls '__name__ == "__main__"' dags/*.py | xargs -n1 basename | sed 's/\.py$$//'); exit 2; }

# The local warm engine: a Spark Connect server with the jars and the embedded catalog, on loopback.
engine: $(JARS_READY)
	$(BIN)/python -m airflow_iceberg_dml.engine start

engine-status: $(INSTALLED)
	$(BIN)/python -m airflow_iceberg_dml.engine status

engine-stop: $(INSTALLED)
	$(BIN)/python -m airflow_iceberg_dml.engine stop

# Two pytest-xdist workers, a test file each at a time: each worker has its own temporary Airflow home,
# catalog, SparkSession and warm engine (tests/conftest.py). Files go out in the order the conftest gives
# (those with a test marked slow first), not pytest-xdist's (most tests first), so that no worker is left
# running a long file alone at the end. TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2

test: $(JARS_READY)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The lowest versions pyproject.toml declares: installed in a throwaway virtualenv, every module imported,
# every example DAG parsed (CI runs it too).
check-floor:
	$(PYTHON) .ci/check-floor

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy airflow_iceberg_dml bench

bench: $(JARS_READY) $(AIRFLOW_HOME)/.migrated
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf .airflow .iceberg build *.egg-info .pytest_cache .mypy_cache .ruff_cache
