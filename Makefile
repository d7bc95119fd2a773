# Two commands do all the set-up on a fresh machine (see README.md):
#   make run   installs the package and judges the paper's three claims over 3 seeds
#              (--scale first; it prints the command for the complete run)
#   make test  installs the test dependencies and runs the test suite
# and two more build and check what a release ships:
#   make docs  installs the docs dependencies and builds the site into docs/_build/html
#   make lint  runs ruff over LINT_PATHS
PYTHON ?= python3
TORCH ?= torch==2.13.0
# The files ruff checks: the whole tree (pyproject.toml configures ruff).
LINT_PATHS ?= .
SPHINXOPTS ?= -W --keep-going

.PHONY: run test install docs docs-clean lint

install:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[plots]"

run: install
	$(PYTHON) -m sparse_token_estimators --scale first --out results

test:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[test]"
	$(PYTHON) -m pytest -q

docs:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[docs]"
	$(PYTHON) -m sphinx $(SPHINXOPTS) -b html docs docs/_build/html

# what the docs build generates: the next build runs every example again
docs-clean:
	rm -rf docs/_build docs/generated docs/auto_examples docs/api.rst docs/sg_execution_times.rst

lint:
	$(PYTHON) -m ruff check $(LINT_PATHS)
