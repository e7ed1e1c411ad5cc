# The two commands that matter: `make demo` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv spark-env demo ui test bench clean

venv: $(STAMP)

# Exact versions come from requirements.lock (used as constraints); see STACK.md for
# why pyspark and pyspark-client must stay at the same version.
$(STAMP): requirements.txt requirements.lock pyproject.toml setup.py kafkalog/_speedups.pyx
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -c requirements.lock -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	$(BIN)/python -c "import pyspark, importlib.metadata as m; \
		assert pyspark.__version__ == m.version('pyspark') == m.version('pyspark-client'), 'pyspark/pyspark-client differ'"
	$(MAKE) --no-print-directory spark-env
	touch $(STAMP)

# `.venv/bin/spark-submit` must work without an activated venv: pip's find-spark-home
# looks for pyspark with the system python3, and executors would run it too. Point both
# at the venv's python (SPARK_HOME/conf/spark-env.sh is read by every Spark script).
spark-env:
	sed -i 's|PYSPARK_DRIVER_PYTHON="$${PYSPARK_PYTHON:-"python3"}"|PYSPARK_DRIVER_PYTHON="$${PYSPARK_PYTHON:-"$(abspath $(BIN))/python"}"|' $(BIN)/find-spark-home
	conf="$$($(BIN)/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/conf" \
		&& mkdir -p "$$conf" \
		&& printf 'export PYSPARK_PYTHON="$${PYSPARK_PYTHON:-%s/python}"\n' "$(abspath $(BIN))" \
		> "$$conf/spark-env.sh"

# demo/ runs from this checkout (it is not installed): `python -m demo` finds it in the current folder
demo: venv
	$(BIN)/python -m kafkalog.demo demo-output
	$(BIN)/python -m demo run --out demo-output

# Airflow (api-server, scheduler, dag-processor) on 127.0.0.1 over the demo's data; Ctrl-C stops it.
ui: venv
	$(BIN)/python -m demo ui --out demo-output

# The suite runs twice: on the compiled fast path (which the install must have
# built) and on the pure-Python reference (KAFKALOG_PURE_PYTHON=1); the pipeline
# tests (Spark, S3, Airflow, browser) do not depend on the decoder path and run once.
# Two pytest-xdist workers, a test module each at a time (--dist loadfile keeps a module's
# fixtures, such as one job run read by many tests, in one process): the Airflow and Spark
# tests spend much of their time waiting on subprocesses. The longest modules go first (the
# two longest one to each worker) and the quick ones last, so that the workers end together
# (tests/conftest.py: LONGEST_FIRST; xdist's reordering is off so that it keeps that order).
# `make test TEST_WORKERS=` runs in one process.
TEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder
test: venv browser postgres
	KAFKALOG_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(TEST_WORKERS) --durations=25
	KAFKALOG_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(TEST_WORKERS) -m "not pipeline"

# The README's screenshots of the report (docs/img/report-overview.png, report-run.png), taken of
# the demo's warehouse as it is now (run `make demo` first); no Airflow is started.
.PHONY: screenshots
screenshots: venv browser
	test -d demo-output/warehouse || (echo "no demo-output/warehouse: run make demo first" && exit 1)
	$(BIN)/python tests/screenshot_report.py demo-output/warehouse --out docs/img --prefix report-

# Debian's chromium for the browser tests (tests/plugin/test_plugin_ui.py); apt-get needs root.
.PHONY: browser
browser:
	command -v chromium || (apt-get update && apt-get install -y chromium)

# Debian's PostgreSQL server for the tests that run a throwaway one (tests/postgres.py: the
# docker stack's catalog database, commits whose answer a proxy drops); apt-get needs root.
.PHONY: postgres
postgres:
	command -v initdb || ls /usr/lib/postgresql/*/bin/initdb || \
		(apt-get update && apt-get install -y postgresql)

# Benchmark-only dependencies (aiokafka) are installed here, not by venv.
# Every benchmark runs, even after one whose target is not met (exit 1); make bench
# then names those and exits 1.
BENCHES := bench_fast bench_decode bench_memory bench_job bench_plan bench_scale bench_iceberg \
	bench_replicas bench_schemas bench_history bench_tiered bench_audit bench_night
bench: venv
	$(BIN)/pip install --disable-pip-version-check -q -c requirements.lock -r bench/requirements.txt
	@unmet=""; for b in $(BENCHES); do \
		echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || unmet="$$unmet $$b"; \
	done; if [ -n "$$unmet" ]; then echo "target not met or failed:$$unmet"; exit 1; fi

clean:
	rm -rf $(VENV) demo-output build *.egg-info
