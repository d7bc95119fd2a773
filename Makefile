# Two commands do all the set-up on a fresh machine (see README.md):
#   make run   installs the package and runs the reproduction on small defaults
#   make test  installs the test dependencies and runs the test suite
PYTHON ?= python3
TORCH ?= torch==2.13.0

.PHONY: run test install

install:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[plots]"

run: install
	$(PYTHON) -m sparse_token_estimators --quick --out results

test:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[test]"
	$(PYTHON) -m pytest -q
