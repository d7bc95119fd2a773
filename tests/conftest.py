"""Shared, seeded fixtures: small sparse-token-selection tasks and fitted nets.

Tests run torch on one thread (the machines that run the suite are small and
shared) and skip ``@pytest.mark.slow`` tests unless ``-m`` names them, e.g.
``python -m pytest -m slow``.
"""

import pytest
import torch

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

torch.set_num_threads(1)

#: (seq_len T, token_dim d, n_selected q) of the small task most tests use
SMALL_TASK = dict(seq_len=10, token_dim=4, n_selected=2)


def pytest_collection_modifyitems(config, items):
    if config.getoption("markexpr"):
        return  # the user chose what to run with -m
    skip = pytest.mark.skip(reason="slow: run with `python -m pytest -m slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def smoke_results():
    """The results of ``reproduce.run(SMOKE)``: seconds, every step of the
    pipeline, no claim. Shared: copy it before changing it."""
    from sparse_token_estimators import reproduce

    return reproduce.run(reproduce.SMOKE, progress=False)


@pytest.fixture(scope="session")
def task():
    """Training data of the small task: 3000 samples."""
    return make_sparse_selection(3000, **SMALL_TASK, random_state=0)


@pytest.fixture(scope="session")
def test_task():
    """Held-out data of the small task, drawn with another seed."""
    return make_sparse_selection(500, **SMALL_TASK, random_state=1)


@pytest.fixture(scope="session")
def tiny_task():
    """200 samples of the small task, for checks that need any fit at all."""
    return make_sparse_selection(200, **SMALL_TASK, random_state=2)


def _fit(estimator, data):
    return estimator.fit(*data)


@pytest.fixture(scope="session")
def fitted_transformer(task):
    """A stochastic-PE transformer trained well enough to select tokens.

    Session scoped to save time: tests must not modify it (clone it instead).
    """
    est = SparseTokenTransformer(pe_dim=32, lr=0.05, max_epochs=15, random_state=0)
    return _fit(est, task)


@pytest.fixture(scope="session")
def fitted_fixed_transformer(task):
    """A fixed-PE transformer with a 16-position table, fitted at seq_len 10."""
    est = SparseTokenTransformer(pe_dim=32, positional_encoding="fixed", max_seq_len=16,
                                 max_epochs=3, random_state=0)
    return _fit(est, task)


@pytest.fixture(scope="session")
def fitted_fcn(task):
    """A small fully-connected net fitted at seq_len 10."""
    return _fit(SparseTokenFCN(hidden_width=32, max_epochs=2, random_state=0), task)
