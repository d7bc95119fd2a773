"""Shared, seeded fixtures: small sparse-token-selection tasks, fitted nets, and the
estimator catalogue (every estimator and variant, small and seeded) that the test
files parametrise over, with the helpers that check a refused call changed nothing.

Tests run torch on one thread (the machines that run the suite are small and
shared), or on ``SPARSE_TOKEN_TEST_THREADS`` threads when that is set (``.ci/run``
runs the tests whose numbers depend on the kernels' rounding again with 2), and
skip ``@pytest.mark.slow`` tests unless ``-m`` names them, e.g.
``python -m pytest -m slow``.
"""

import os

import pytest
import torch
from skorch.callbacks import Callback

from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    make_sparse_selection,
)

torch.set_num_threads(int(os.environ.get("SPARSE_TOKEN_TEST_THREADS", "1")))

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


# -- the estimator catalogue ----------------------------------------------------------
#
# Every estimator class and the variants whose code paths differ (positional
# encodings, recurrent cells), each small and seeded: the one place a test file
# takes its estimators from. Test files import these names
# (``from conftest import make_estimator``; pytest puts tests/ on the path) to
# parametrise at collection, and use the fixtures below at run time. A file
# that needs other sizes or training settings passes them to make_estimator.

#: name -> (estimator class, its own small parameters)
ESTIMATORS = {
    "transformer": (SparseTokenTransformer, dict(pe_dim=8, n_pe_draws=2)),
    "transformer-fixed": (SparseTokenTransformer, dict(pe_dim=8, positional_encoding="fixed",
                                                       max_seq_len=16)),
    "transformer-sinusoidal": (SparseTokenTransformer,
                               dict(pe_dim=8, positional_encoding="sinusoidal", lr=0.05)),
    "transformer-learned": (SparseTokenTransformer, dict(pe_dim=8, positional_encoding="learned",
                                                         max_seq_len=16)),
    "transformer-randomized": (SparseTokenTransformer,
                               dict(pe_dim=8, positional_encoding="randomized", max_seq_len=16,
                                    n_pe_draws=2)),
    "fcn": (SparseTokenFCN, dict(hidden_width=16)),
    "encoder": (SparseTokenEncoder, dict(d_model=8)),  # no positions
    "encoder-fixed": (SparseTokenEncoder, dict(d_model=8, positional_encoding="fixed",
                                               max_seq_len=16)),
    "encoder-rope": (SparseTokenEncoder, dict(d_model=8, positional_encoding="rope")),
    "encoder-randomized": (SparseTokenEncoder, dict(d_model=8, positional_encoding="randomized",
                                                    max_seq_len=16)),
    "encoder-stochastic": (SparseTokenEncoder,
                           dict(d_model=8, positional_encoding="stochastic")),
    "rnn": (SparseTokenRNN, dict(hidden_size=8)),  # a GRU
    "rnn-lstm": (SparseTokenRNN, dict(cell="lstm", hidden_size=8)),
    "ssm": (SparseTokenSSM, dict(d_model=8, d_state=4)),  # Mamba
}
#: what every catalogue instance shares unless told otherwise: seeded, one short epoch
TRAINING = dict(max_epochs=1, batch_size=8, random_state=0)
#: the paper's estimators, and those beyond them: one per class and per length rule
#: (the fixed tables refuse X longer than max_seq_len, the FCN any other length)
PAPER = ("transformer", "transformer-fixed", "fcn")
MORE = ("encoder", "encoder-fixed", "rnn", "ssm")
EACH_KIND = PAPER + MORE
#: the sizes of the catalogue's task (T within every table's max_seq_len)
CATALOGUE_TASK = dict(seq_len=6, token_dim=3, n_selected=2)


def make_estimator(name, **params):
    """A fresh catalogue estimator; ``params`` override the catalogue's values."""
    Estimator, own = ESTIMATORS[name]
    return Estimator(**{**own, **TRAINING, **params})


def make_task(n_samples=96, *, random_state=0, **sizes):
    """Data for the catalogue's estimators: ``CATALOGUE_TASK`` unless ``sizes`` say."""
    return make_sparse_selection(n_samples, **{**CATALOGUE_TASK, **sizes},
                                 random_state=random_state)


def estimator_class(name):
    return ESTIMATORS[name][0]


@pytest.fixture(scope="session")
def catalogue_task():
    """Training data of the catalogue's task (96 sequences)."""
    return make_task()


@pytest.fixture(scope="session")
def catalogue_test_task():
    """Held-out data of the catalogue's task, drawn with another seed."""
    return make_task(40, random_state=1)


@pytest.fixture(params=list(ESTIMATORS))
def catalogue_name(request):
    """Each catalogue name in turn."""
    return request.param


@pytest.fixture(scope="session")
def fitted_catalogue(catalogue_task):
    """Each catalogue estimator fitted on ``catalogue_task``, built on first use.

    Shared by the whole session: tests must not change one (``copy.deepcopy`` it).
    """
    class Fitted(dict):
        def __missing__(self, name):
            self[name] = make_estimator(name).fit(*catalogue_task)
            return self[name]

    return Fitted()


# -- nothing changes: what a refused call must leave alone ---------------------------


class Spy(Callback):
    """Records every training event skorch sends."""

    def initialize(self):
        self.events = []
        return self

    def on_train_begin(self, net, **kwargs):
        self.events.append("train_begin")

    def on_epoch_begin(self, net, **kwargs):
        self.events.append("epoch_begin")

    def on_batch_begin(self, net, **kwargs):
        self.events.append("batch_begin")


def snapshot(est):
    """Everything a refused call must leave alone: fitted attributes, parameters,
    weights, history, the spy's events (when it has a ``spy`` callback)."""
    state = {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}
    state["params"] = est.get_params(deep=False)
    if hasattr(est, "module_"):
        state["weights"] = {k: v.clone() for k, v in est.module_.state_dict().items()}
        state["history_len"] = len(est.history)
        state["module_id"] = id(est.module_)
        spy = dict(est.callbacks_).get("spy")
        if spy is not None:
            state["events"] = list(spy.events)
    return state


def assert_unchanged(before, after):
    assert before.keys() == after.keys()
    for key, value in before.items():
        if key == "weights":
            assert all(torch.equal(value[k], after[key][k]) for k in value)
        elif key in ("history_", "callbacks_", "module_", "optimizer_", "criterion_",
                     "torch_rng_", "virtual_params_"):
            continue  # compared through weights / history_len / events / module_id
        elif key == "params":
            assert value.keys() == after[key].keys()
            for name in value:
                assert value[name] is after[key][name] or value[name] == after[key][name], name
        else:
            assert value == after[key], key
