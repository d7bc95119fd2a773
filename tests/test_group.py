"""``fit_group``: every fit of a group ends bit for bit as its lone fit.

Per family and layout, over whole (short) fits on a fixed sample and on a
stream, with every encoding that draws noise: weights, optimizer state,
``history_`` (up to the epochs' durations), predictions. A diverging rate is
stopped alone; the others match their lone fits. What cannot join a group
(a subclass, a user's module) is fitted alone, with the same result.
"""

import math

import numpy as np
import pytest
import torch
from conftest import ESTIMATORS
from skorch.callbacks import Callback

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators._group import fit_group, group_cpu_seconds
from sparse_token_estimators.callbacks import StepBudget, TrainingDivergedError
from sparse_token_estimators.modules import FullyConnectedNet

T, D, Q = 6, 3, 2
#: the catalogue's models that matter here: every family, every encoding that draws noise
NAMES = ("transformer", "transformer-randomized", "transformer-fixed", "fcn",
         "encoder-rope", "encoder-stochastic", "encoder-randomized", "rnn", "rnn-lstm")
#: a group: three rates, two seeds
GRID = [(lr, seed) for lr in (0.003, 0.01, 0.03) for seed in (0, 1)]


def _make(name, lr, seed, **params):
    kind, own = ESTIMATORS[name]
    return kind(**{**own, "lr": lr, "random_state": seed, "max_epochs": 2, "batch_size": 16,
                   "device": "cpu", **params})


def _data(layout, seed, stream):
    if stream:
        return SparseSelectionStream(T, D, Q, n_samples=40, random_state=seed,
                                     layout=layout), None
    return make_sparse_selection(40, T, D, Q, layout=layout, random_state=seed)


def _fit(net, X, y):
    return net.fit(X) if y is None else net.fit(X, y)


def assert_same_fit(grouped, lone, X_test):
    """Weights, optimizer state, history (but the durations) and predictions: equal."""
    for (name, a), b in zip(grouped.module_.state_dict().items(),
                            lone.module_.state_dict().values()):
        assert torch.equal(a, b), name
    for a, b in zip(grouped.optimizer_.state.values(), lone.optimizer_.state.values()):
        assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)

    def history(net):
        return [{k: v for k, v in row.items() if k not in ("dur", "fit_cpu_s")}
                for row in net.history_]

    assert history(grouped) == history(lone)
    np.testing.assert_array_equal(grouped.predict(X_test), lone.predict(X_test))


@pytest.mark.parametrize("layout", ["indicator", "query"])
@pytest.mark.parametrize("name", NAMES)
def test_group_equals_lone_fits(name, layout):
    if layout == "query" and name == "transformer-randomized":
        pytest.skip("the query layout's paper's model is tested with the stochastic encoding")
    stream = name in ("transformer", "rnn", "encoder-stochastic")  # and a sample otherwise
    nets = [_make(name, lr, seed, layout=layout, n_selected=Q if layout == "query" else None)
            for lr, seed in GRID]
    data = [_data(layout, seed, stream) for _, seed in GRID]
    assert fit_group(nets, data) == [None] * len(GRID)
    X_test, _ = make_sparse_selection(24, T, D, Q, layout=layout, random_state=9)
    for net, (lr, seed) in zip(nets, GRID):
        lone = _fit(_make(name, lr, seed, layout=layout,
                          n_selected=Q if layout == "query" else None),
                    *_data(layout, seed, stream))
        assert_same_fit(net, lone, X_test)


def test_diverging_rate_stopped_alone():
    # SGD at lr=1e30 overflows in its first steps; the rates around it go on
    rates = (0.01, 1e30, 0.03)
    X, y = make_sparse_selection(64, T, D, Q, random_state=0)

    def make(lr):
        return SparseTokenFCN(hidden_width=8, optimizer=torch.optim.SGD, lr=lr, max_epochs=3,
                              batch_size=16, random_state=0, device="cpu")

    nets = [make(lr) for lr in rates]
    errors = fit_group(nets, [(X, y)] * 3)
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], TrainingDivergedError)
    with pytest.raises(TrainingDivergedError) as lone_error:
        make(1e30).fit(X, y)
    assert str(errors[1]) == str(lone_error.value)
    assert not nets[1].initialized_  # as a failed lone fit leaves it
    for i in (0, 2):
        assert_same_fit(nets[i], make(rates[i]).fit(X, y), X)


def test_callbacks_stop_and_clock():
    """A step budget (a callback's stop) ends its model alone; the group's CPU time is
    shared out among its models while they train."""
    X, y = make_sparse_selection(64, T, D, Q, random_state=0)
    clocks = []

    class Clock(Callback):
        def on_train_end(self, net, **kwargs):
            clocks.append(group_cpu_seconds(net, default=-1.0))

    def make(steps):
        return SparseTokenTransformer(pe_dim=8, max_epochs=10, batch_size=16, random_state=1,
                                      device="cpu", callbacks=[StepBudget(steps), Clock()])

    nets = [make(steps) for steps in (3, 9)]
    assert fit_group(nets, [(X, y)] * 2) == [None, None]
    assert [net.history_[-1, "train_steps"] for net in nets] == [3, 9]
    assert all(0 < c < math.inf for c in clocks)
    for net, steps in zip(nets, (3, 9)):
        assert_same_fit(net, make(steps).fit(X, y), X)
    assert group_cpu_seconds(nets[0], default=-1.0) == -1.0  # out of a group: the default


class _MyFCN(SparseTokenFCN):
    """A subclass: it may change a step of the loop, so it is fitted alone."""

    def get_loss(self, y_pred, y_true, *args, **kwargs):
        return 2 * super().get_loss(y_pred, y_true, *args, **kwargs)


class _MyNet(FullyConnectedNet):
    """A user's module."""


def test_fallback_to_lone_fits():
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)
    makers = [lambda: _MyFCN(hidden_width=8, max_epochs=2, batch_size=16, random_state=0),
              lambda: SparseTokenFCN(_MyNet, hidden_width=8, max_epochs=2, batch_size=16,
                                     random_state=1),
              lambda: SparseTokenFCN(hidden_width=8, max_epochs=2, batch_size=16,
                                     random_state=2),
              lambda: SparseTokenFCN(hidden_width=-1)]  # refused, as by its own fit
    nets = [make() for make in makers]
    errors = fit_group(nets, [(X, y)] * len(nets))
    assert errors[:3] == [None] * 3 and isinstance(errors[3], ValueError)
    for net, make in zip(nets[:3], makers):
        assert_same_fit(net, make().fit(X, y), X)
    with pytest.raises(ValueError, match="one \\(X, y\\) per estimator"):
        fit_group(nets, [(X, y)])
