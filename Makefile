# streamiq: `make demo` runs the embedded demo, `make test` runs every test.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# what the parts need beyond pip, resolved once by `streamiq install` (the Ivy inside
# PySpark, from Maven Central or ~/.m2; no Maven): Apache Kafka's jars and the broker's
# class-data archive, Spark's Kafka connector (versions: streamiq/pipeline/connector.py)
JARS := $(VENV)/.jars
# make test's pytest-xdist workers: most integration tests wait on real parts (Spark
# micro-batches, restarts, heartbeats), so three share two cores well now that a part's
# start costs less CPU (fresh clones' .ci/run on 2 cores, same day: 12:03 of pytest with 2
# workers, 10:46 with 3, ~1.3 of 2 cores busy, load 8-14). WORKERS=0 runs one process
WORKERS ?= 3
# Debian's Chromium when missing: installs made side by side wait for
# each other's dpkg lock
APT := apt-get -y -q -o DPkg::Lock::Timeout=300

.PHONY: install chromium demo test test-unit test-integration spark-cds lint unasync bench clean

# uv installs what pip would (the same versions), bytecode compiled as pip does: 30 s
# instead of 53 s from an empty cache on 2 cores (this machine sets PYTHONDONTWRITEBYTECODE)
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv
	$(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode -e '.[dev]'
	touch $(STAMP)

$(JARS): $(STAMP) src/streamiq/kafka/jars.py src/streamiq/kafka/install.py \
		src/streamiq/pipeline/connector.py
	$(BIN)/streamiq install
	touch $(JARS)

# the dashboard's browser test drives Debian's Chromium through Playwright (no browser
# download): installed with apt-get when missing and running as root, checked every time
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && export DEBIAN_FRONTEND=noninteractive \
	  && { $(APT) install chromium >/dev/null \
	       || { $(APT) update >/dev/null && $(APT) install chromium >/dev/null; }; }; } \
	  || echo "note: Chromium not installed (apt-get install -y chromium): the dashboard's browser test will fail"

install: $(STAMP) $(JARS) chromium

demo: $(STAMP) $(JARS)
	$(BIN)/streamiq up $(ARGS)

# before pytest, side by side (each part's output kept together): the tests' Spark
# class-data archive; Kafka's jars and the connector (streamiq install); the linters and
# the docs' strict build; Chromium (fresh clones on 2 cores: 84 s one after the other,
# 20 s of it Chromium's install; ~40 s now)
test: $(STAMP)
	$(MAKE) --no-print-directory -j3 -O spark-cds $(JARS) lint chromium
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -q -ra --durations=25 \
	  -n $(WORKERS) --dist loadfile --no-loadscope-reorder tests

# the tests' Spark class-data archive (tests/spark_cds.py: made once, kept). The JVM's
# classpath is PySpark's alone (the connector's jars are added by Spark's own class
# loader, never archived), so it need not wait for them
spark-cds: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python tests/spark_cds.py

test-unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test-integration: spark-cds $(JARS) chromium
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/pytest -q -ra tests/integration

# the docs site too: --strict fails on a link to a missing page or #anchor (mkdocs.yml's
# validation; not with --quiet, which hides the warnings strict counts: mkdocs 1.6.1);
# the site goes to .venv/site. tests/unit/test_docs_site.py runs this line
lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src tests  # strict (pyproject.toml: [tool.mypy])
	$(BIN)/mkdocs build --strict

# client/sync.py from client/aio.py, by the unasync package (the rule: tests/unit/client/test_unasync.py)
unasync: $(STAMP)
	$(BIN)/python tests/unit/client/test_unasync.py

bench: $(STAMP) $(JARS)
	@command -v wrk >/dev/null || { echo "bench_queries needs wrk: apt-get install -y wrk"; exit 2; }
	$(BIN)/python bench/bench_queries.py
	$(BIN)/python bench/bench_ha.py
	$(BIN)/python bench/bench_hung.py
	$(BIN)/python bench/bench_restore_rows.py
	$(BIN)/python bench/bench_restore_fetch.py
	$(BIN)/python bench/bench_snapshots.py
	$(BIN)/python bench/bench_scale.py
	$(BIN)/python bench/bench_freshness.py
	$(BIN)/python bench/bench_idle.py
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_log_level.py
	$(BIN)/python bench/bench_first_write.py
	$(BIN)/python bench/bench_soak.py
	$(BIN)/python bench/bench_auth.py
	$(BIN)/python bench/bench_sizing.py
	$(BIN)/python bench/bench_cluster.py

clean:
	rm -rf $(VENV) .streamiq .pytest_cache .mypy_cache .ruff_cache
