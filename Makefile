# streamiq: `make demo` runs the embedded demo, `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Apache Kafka's jars for the embedded broker, resolved by Maven once (streamiq/kafka/jars.py),
# and its class-data archive, made by one short broker run (streamiq/kafka/install.py, cds.py)
KAFKA := $(VENV)/.kafka-jars
# Spark's Kafka connector at PySpark's version, resolved by Maven once (pipeline/connector.py)
CONNECTOR := $(VENV)/.spark-kafka-jars
# make test's pytest-xdist workers: most integration tests wait on real parts (Spark
# micro-batches, restarts, heartbeats), so two share two cores well (fresh clones'
# .ci/run: 27 min of pytest with 2 workers, load 7-8, 0.95 cores busy on average; 31 min
# with 3, load 14-19: the Spark JVMs then fight for the cores). WORKERS=0 runs one process
WORKERS ?= 2

.PHONY: install chromium demo test test-unit test-integration lint unasync bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Maven from Debian's packages when missing (and running as root), then the jars
$(KAFKA): $(STAMP) src/streamiq/kafka/broker-pom.xml src/streamiq/kafka/install.py
	@command -v mvn >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && export DEBIAN_FRONTEND=noninteractive \
	  && { apt-get install -y -q maven >/dev/null \
	       || { apt-get update -q >/dev/null && apt-get install -y -q maven >/dev/null; }; }; } \
	  || { echo "Maven is needed once to resolve Apache Kafka's jars: apt-get install maven"; exit 2; }
	$(BIN)/streamiq broker --install
	touch $(KAFKA)

$(CONNECTOR): $(KAFKA) src/streamiq/pipeline/connector-pom.xml
	$(BIN)/python -m streamiq.pipeline.connector --install
	touch $(CONNECTOR)

# the dashboard's browser test drives Debian's Chromium through Playwright (no browser
# download): installed with apt-get when missing and running as root, checked every time
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && export DEBIAN_FRONTEND=noninteractive \
	  && { apt-get install -y -q chromium >/dev/null \
	       || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } \
	  || echo "note: Chromium not installed (apt-get install -y chromium): the dashboard's browser test will fail"

install: $(STAMP) $(KAFKA) $(CONNECTOR) chromium

demo: $(STAMP) $(KAFKA) $(CONNECTOR)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/streamiq up $(ARGS)

test: $(STAMP) $(KAFKA) $(CONNECTOR) chromium
	# the tests' Spark class-data archive (tests/spark_cds.py, once) beside the linters
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python tests/spark_cds.py & \
	  $(BIN)/ruff check src tests bench && \
	  $(BIN)/mypy src tests; rc=$$?; wait; exit $$rc  # mypy: strict (pyproject.toml)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -q -ra --durations=25 \
	  -n $(WORKERS) --dist loadfile tests

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test-integration: $(STAMP) $(KAFKA) $(CONNECTOR) chromium
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python tests/spark_cds.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -q -ra tests/integration

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src tests  # strict (pyproject.toml: [tool.mypy])

# client/sync.py from client/aio.py, by the unasync package (the rule: tests/unit/client/test_unasync.py)
unasync: $(STAMP)
	$(BIN)/python tests/unit/client/test_unasync.py

bench: $(STAMP) $(KAFKA) $(CONNECTOR)
	@command -v wrk >/dev/null || { echo "bench_queries needs wrk: apt-get install -y wrk"; exit 2; }
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_queries.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_ha.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_freshness.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_pipeline.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_log_level.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_first_write.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_soak.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_auth.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_sizing.py
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python bench/bench_cluster.py

clean:
	rm -rf $(VENV) .streamiq .pytest_cache .mypy_cache .ruff_cache
