# Every target creates or updates the virtualenv it needs.
# Python may cache bytecode here whatever the environment says: a test run starts about 200 Python
# processes, each of which would otherwise compile fakehop's modules afresh, and pytest would
# rewrite the asserts of every test module and plugin afresh in each of its processes.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# every package the tests install, at the versions that last passed: `make lock` refreshes it
LOCK := requirements/test.txt
# the SDK range fakehop's tests are run at, both ends: the newest of the day and these
OLDEST_SDKS := openai==3.19.1 anthropic==2.0.0
NEWEST_SDKS := openai anthropic
JS_LATEST := tests/.js-latest
# more workers than cores: many tests spend much of their time waiting on a server or a clock
TEST_WORKERS ?= 8

.PHONY: serve test test-latest test-oldest lock lint bench bench-guard soak golden docs docs-serve docs-tables clean

# fakehop itself is installed with the build backend the lock holds, so nothing is left to the day
define install-locked
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --disable-pip-version-check -r $(LOCK)
	$(1)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
endef

$(STAMP): pyproject.toml $(LOCK)
	$(call install-locked,$(VENV))
	touch $(STAMP)

# The lock, from pyproject's runtime dependencies and test extra: newest versions within their
# ranges, written without this machine's own package indexes.
lock: $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check pip-tools
	$(VENV)/bin/pip-compile --quiet --upgrade --extra test --strip-extras --allow-unsafe \
		--no-emit-find-links --no-emit-index-url --output-file $(LOCK) pyproject.toml

serve: $(STAMP)
	$(VENV)/bin/fakehop serve

# pytest-xdist workers handed a test at a time in the order tests/conftest.py sets (a module whose
# tests share a costly fixture goes to one worker whole: its xdist_group), a running count of the
# tests done, and the ten slowest at the end
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -o console_output_style=count --durations=10 $(TEST_ARGS)

# ruff's lint and format check, and mypy, as pyproject.toml configures them
LINTED := fakehop tests bench soak docs/examples
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

# The SDK-facing tests (those that drive an official SDK, Python's or JavaScript's) against the
# newest SDKs of the day, in a venv of their own; the rest of the lock as it is.
SDK_TESTS = $(shell grep -l -E '^import (openai|anthropic)|^from \.(sdk_results|clients|agents) import|^from \. import clients' tests/test_*.py)

test-latest:
	$(call install-locked,.venv-latest)
	.venv-latest/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --upgrade-strategy eager $(NEWEST_SDKS)
	rm -rf $(JS_LATEST) && mkdir -p $(JS_LATEST) && cp tests/js/package.json tests/js/*.mjs $(JS_LATEST)/
	cd $(JS_LATEST) && npm install --no-audit --no-fund --loglevel=error openai@latest @anthropic-ai/sdk@latest
	cd $(JS_LATEST) && npm ls --depth=0 openai @anthropic-ai/sdk
	FAKEHOP_JS_DIR=$(CURDIR)/$(JS_LATEST) .venv-latest/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(SDK_TESTS) tests/test_js_sdks.py $(TEST_ARGS)

# The Python SDK-facing tests against the oldest SDKs fakehop supports (the JavaScript SDKs' are
# those of tests/js/package-lock.json).
test-oldest:
	$(call install-locked,.venv-oldest)
	.venv-oldest/bin/python -m pip install --quiet --disable-pip-version-check $(OLDEST_SDKS)
	.venv-oldest/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(SDK_TESTS) $(TEST_ARGS)

soak: $(STAMP)
	$(PY) -m soak
	FAKEHOP_FUZZ_EXAMPLES=5000 $(PY) -m pytest -q tests/test_scenario_fuzz.py tests/test_bad_requests.py

# fakehop against a bare aiohttp handler; BENCH_ARGS="--quick" for a smoke run (see python -m bench --help)
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

# only fakehop's instructions per request against bench/baseline.json (needs valgrind); a growth
# that is meant: `$(PY) -m bench.guard --update`, and commit bench/baseline.json with the change
bench-guard: $(STAMP)
	$(PY) -m bench.guard $(GUARD_ARGS)

golden: $(STAMP)
	$(PY) -m tests.golden_files --write

# The documentation site, from mkdocs.yml and docs/, into site/; a broken link or anchor fails it
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	$(VENV)/bin/mkdocs serve --strict

# rewrites the pages a test run computes (what the SDKs raise for each bundled fault): review the diff
docs-tables: $(STAMP)
	FAKEHOP_WRITE_DOCS=1 $(PY) -m pytest -q tests/test_docs_fault_table.py

clean:
	rm -rf $(VENV) .venv-latest .venv-oldest $(JS_LATEST) build dist *.egg-info fakehop-results site
