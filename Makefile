# Every target creates or updates the virtualenv it needs.
# Python may cache bytecode here whatever the environment says: a test run starts about 200 Python
# processes, each of which would otherwise compile fakehop's modules afresh, and pytest would
# rewrite the asserts of every test module and plugin afresh in each of its processes.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# more workers than cores: many tests spend much of their time waiting on a server or a clock
TEST_WORKERS ?= 8

.PHONY: serve test bench soak golden clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/fakehop serve

# pytest-xdist workers handed a test at a time in the order tests/conftest.py sets (a module whose
# tests share a costly fixture goes to one worker whole: its xdist_group), a running count of the
# tests done, and the ten slowest at the end
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder -o console_output_style=count --durations=10 $(TEST_ARGS)

soak: $(STAMP)
	$(PY) -m soak
	FAKEHOP_FUZZ_EXAMPLES=5000 $(PY) -m pytest -q tests/test_scenario_fuzz.py tests/test_bad_requests.py

# fakehop against a bare aiohttp handler; BENCH_ARGS="--quick" for a smoke run (see python -m bench --help)
bench: $(STAMP)
	$(PY) -m bench $(BENCH_ARGS)

golden: $(STAMP)
	$(PY) -m tests.golden_files --write

clean:
	rm -rf $(VENV) build dist *.egg-info fakehop-results
