# The two commands of the README:
#   make demo   sets everything up and runs the main demo (UCI Boston, Bayes by Backprop, 20 splits)
#   make test   sets everything up and runs the test suite
VENV ?= .venv
PYTHON := $(VENV)/bin/python
DATA_DIR ?=
DATA_ARG := $(if $(DATA_DIR),--data-dir $(DATA_DIR),)
PYTEST_ARGS ?= -q -n 2

.PHONY: setup demo test test-pyro-lowest lint test-all bench docs results-check

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh $(VENV)

setup: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PYTHON) reproductions/uci_regression.py --method bbb --dataset bostonHousing --splits 0-19 $(DATA_ARG)

test: $(VENV)/.installed
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# The library's tests under the lowest Pyro it supports (pyproject's pyro-ppl floor), installed
# beside the newest into .pyro-lowest/ and put first on the path; `make test` runs the newest
PYRO_LOWEST ?= 1.9.0
LOWEST_TESTS ?= tests/distributions tests/models tests/guides tests/poutine tests/inference tests/test_save_load.py
test-pyro-lowest: $(VENV)/.installed
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-deps --upgrade --target .pyro-lowest "pyro-ppl==$(PYRO_LOWEST)"
	PYTHONPATH=$(CURDIR)/.pyro-lowest $(PYTHON) -c "import pyro; assert pyro.__version__ == '$(PYRO_LOWEST)', pyro.__file__; print('pyro', pyro.__version__)"
	PYTHONPATH=$(CURDIR)/.pyro-lowest $(PYTHON) -m pytest $(PYTEST_ARGS) $(LOWEST_TESTS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

test-all: $(VENV)/.installed
	$(PYTHON) -m pytest $(PYTEST_ARGS) --runslow

# How current the committed results are (manifest, claims ledger, reference matrix): a report,
# never a gate of `make test`
results-check: $(VENV)/.installed
	$(PYTHON) tools/results_check.py

bench: $(VENV)/.installed
	$(PYTHON) benchmarks/step_overhead.py

# The documentation site (Sphinx, furo, MyST-NB; docs/conf.py) into docs/_build/html. Warnings
# are errors: a broken reference or a public name without a docstring fails the build.
$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html
