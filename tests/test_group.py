"""``fit_group``: every fit of a group ends as its lone fit.

"exact": per family and layout, over whole (short) fits on a fixed sample and
on a stream, with every encoding that draws noise: weights, optimizer state,
``history_`` (up to the epochs' durations), predictions, bit for bit. A
diverging rate is stopped alone; the others match their lone fits. "fused"
(the estimators that declare a ``fused_trainer``): the same to float rounding;
what does not declare one (a subclass of another family, a user's module) is
fitted alone, with the same result. Bad arguments are refused before any fit.
"""

import math
import re

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
from sparse_token_estimators._fused import StackedTrainer, trainer_of
from sparse_token_estimators._group import fit_group, group_cpu_seconds
from sparse_token_estimators.callbacks import StepBudget, TrainingDivergedError
from sparse_token_estimators.modules import FullyConnectedNet, SparseTokenAttention

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
    assert fit_group(nets, [(X, y)] * 2, trainer="fused") == [None, None]
    assert [net.history_[-1, "train_steps"] for net in nets] == [3, 9]
    assert all(0 < c < math.inf for c in clocks)
    for net, steps in zip(nets, (3, 9)):
        assert_close_fit(net, make(steps).fit(X, y), X)
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


# -- fused mode: the paper's model as one stacked model, equal to float rounding ----------

def assert_close_fit(grouped, lone, X_test):
    """Weights, Adam state, losses and predictions equal to float rounding; the rest equal."""
    torch.testing.assert_close(grouped.module_.W, lone.module_.W, rtol=1e-5, atol=1e-6)
    (a,), (b,) = (net.optimizer_.state_dict()["state"].values() for net in (grouped, lone))
    assert a["step"] == b["step"]
    torch.testing.assert_close(a["exp_avg"], b["exp_avg"], rtol=1e-4, atol=1e-7)
    assert len(grouped.history_) == len(lone.history_)
    for row_a, row_b in zip(grouped.history_, lone.history_):
        assert row_a.keys() == row_b.keys()
        losses = [[batch["train_loss"] for batch in row["batches"]] for row in (row_a, row_b)]
        assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    np.testing.assert_allclose(grouped.predict(X_test), lone.predict(X_test), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("layout", ["indicator", "query"])
@pytest.mark.parametrize("encoding", ["stochastic", "randomized", "fixed"])
def test_fused_equals_lone_fits_to_rounding(encoding, layout):
    params = dict(positional_encoding=encoding, max_seq_len=16, layout=layout,
                  n_selected=Q if layout == "query" else None)
    nets = [_make("transformer", lr, seed, **params) for lr, seed in GRID]
    data = [_data(layout, seed, stream=encoding == "stochastic") for _, seed in GRID]
    assert fit_group(nets, data, trainer="fused") == [None] * len(GRID)
    X_test, _ = make_sparse_selection(24, T, D, Q, layout=layout, random_state=9)
    for net, (lr, seed) in zip(nets, GRID):
        lone = _fit(_make("transformer", lr, seed, **params),
                    *_data(layout, seed, stream=encoding == "stochastic"))
        assert_close_fit(net, lone, X_test)


class _DivergeAt(Callback):
    """Raise as DivergenceCheck does, at a given step (the paper's model's loss is bounded:
    it cannot explode on its own)."""

    def __init__(self, step):
        self.step = step

    def on_batch_end(self, net, batch=None, training=False, **kwargs):
        if len(net.history) * 10 + len(net.history[-1]["batches"]) >= self.step:
            raise TrainingDivergedError("diverged on purpose")


def test_fused_masks_a_model_that_leaves():
    """A model stopped by its budget keeps the weights of its last step while the others
    go on; a diverged one is refused as alone; the others match their lone fits."""
    X, y = make_sparse_selection(64, T, D, Q, random_state=0)

    def make(lr, callbacks=()):
        return SparseTokenTransformer(pe_dim=8, n_pe_draws=2, lr=lr, max_epochs=3,
                                      batch_size=16, random_state=0, device="cpu",
                                      callbacks=list(callbacks))

    makers = [lambda: make(0.01), lambda: make(0.03, [StepBudget(5)]),
              lambda: make(0.1, [_DivergeAt(13)]), lambda: make(0.3)]
    nets = [m() for m in makers]
    errors = fit_group(nets, [(X, y)] * len(nets), trainer="fused")
    assert errors[:2] == [None, None] and errors[3] is None
    assert isinstance(errors[2], TrainingDivergedError) and not nets[2].initialized_
    assert nets[1].history_[-1, "train_steps"] == 5
    for i in (0, 1, 3):
        assert_close_fit(nets[i], makers[i]().fit(X, y), X)


def test_fused_falls_back_to_exact():
    # no fused step for the FCN: the group is trained exactly, bit for bit
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)

    def make(lr):
        return SparseTokenFCN(hidden_width=8, lr=lr, max_epochs=2, batch_size=16,
                              random_state=0, device="cpu")

    nets = [make(lr) for lr in (0.01, 0.03)]
    assert fit_group(nets, [(X, y)] * 2, trainer="fused") == [None, None]
    for net, lr in zip(nets, (0.01, 0.03)):
        assert_same_fit(net, make(lr).fit(X, y), X)
    with pytest.raises(ValueError, match="trainer must be 'exact' .* or 'fused'"):
        fit_group(nets, [(X, y)] * 2, trainer="vmap")


def test_reproduction_trainer_names_fused_records_and_keeps_them_apart():
    from dataclasses import replace

    from sparse_token_estimators.reproduce import SMOKE, Progress
    from sparse_token_estimators.reproduce._fits import Fit, run_fits
    from sparse_token_estimators.reproduce._records import config_identity

    fused = replace(SMOKE, trainer="fused")
    assert "trainer" not in config_identity(SMOKE)  # exact: the stores of before
    assert config_identity(fused)["trainer"] == "fused"
    with pytest.raises(ValueError, match="trainer must be 'exact' .* or 'fused'"):
        replace(SMOKE, trainer="vmap")
    fits = [Fit("paper", 4, SMOKE.seq_len, lr=lr) for lr in (0.01, 0.03)] + \
        [Fit("fcn", 8, SMOKE.seq_len)]
    exact = run_fits(SMOKE, fits, Progress(0, enabled=False))
    records = run_fits(fused, fits, Progress(0, enabled=False))
    for key, record in records.items():
        assert record.get("trainer") == ("fused" if key[0].model == "paper" else None)
        assert "trainer" not in exact[key]
        assert record["val_r2"] == pytest.approx(exact[key]["val_r2"], abs=1e-6)


def test_runner_sends_one_job_per_group_and_splits_for_idle_workers():
    from dataclasses import replace

    from sparse_token_estimators.reproduce import SMOKE
    from sparse_token_estimators.reproduce._fits import Fit, _jobs

    grid = [(Fit("paper", 4, SMOKE.seq_len, lr=lr), seed) for lr in (0.01, 0.03, 0.1)
            for seed in (0, 1)]
    other = [(Fit("fcn", 8, SMOKE.seq_len), seed) for seed in (0, 1)]
    jobs = _jobs(replace(SMOKE, n_jobs=1), grid + other, {})
    assert sorted(len(job) for job in jobs) == [2, 6]  # one job per (model, width)
    jobs = _jobs(replace(SMOKE, n_jobs=4), grid, {})  # one group, four workers
    assert len(jobs) == 4
    assert sorted((f, s) for job in jobs for f, s, _ in job) == sorted(grid)


def test_fused_group_with_batches_of_different_sizes():
    # 40 and 48 sequences in batches of 16: the last batches differ (8 and 16)
    nets = [_make("transformer", lr, 0) for lr in (0.01, 0.03)]
    data = [make_sparse_selection(n, T, D, Q, random_state=0) for n in (40, 48)]
    assert fit_group(nets, data, trainer="fused") == [None, None]
    for net, lr, (X, y) in zip(nets, (0.01, 0.03), data):
        assert_close_fit(net, _make("transformer", lr, 0).fit(X, y), X)


def test_a_fit_failing_in_its_loop_set_up_leaves_the_others():
    # a valid split that fails inside skorch's fit_loop (the data is too small to split)
    from skorch.dataset import ValidSplit

    X, y = make_sparse_selection(48, T, D, Q, random_state=0)

    def make(seed, **params):
        return SparseTokenFCN(hidden_width=8, max_epochs=2, batch_size=16, random_state=seed,
                              device="cpu", **params)

    nets = [make(0), make(1, train_split=ValidSplit(100)), make(2)]
    data = [(X, y), (X[:2], y[:2]), (X, y)]
    errors = fit_group(nets, data)
    assert errors[0] is None and errors[2] is None and errors[1] is not None
    with pytest.raises(type(errors[1])):
        make(1, train_split=ValidSplit(100)).fit(X[:2], y[:2])
    for i in (0, 2):
        assert_same_fit(nets[i], make(i).fit(X, y), X)


def test_the_state_space_model_is_fitted_alone():
    pytest.importorskip("mambapy")
    from sparse_token_estimators import SparseTokenSSM

    X, y = make_sparse_selection(32, T, D, Q, random_state=0)

    def make(lr):
        return SparseTokenSSM(d_model=4, d_state=2, max_epochs=1, batch_size=16, lr=lr,
                              random_state=0, device="cpu")

    nets = [make(lr) for lr in (0.01, 0.03)]
    assert fit_group(nets, [(X, y)] * 2) == [None, None]
    for net, lr in zip(nets, (0.01, 0.03)):
        assert_same_fit(net, make(lr).fit(X, y), X)


class _Interrupt(Callback):
    """A Ctrl-C from a callback: raised at the end of epoch ``at``."""

    def __init__(self, at):
        self.at = at

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) == self.at:
            raise KeyboardInterrupt(f"interrupted at epoch {self.at}")


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_stop_all_stops_every_fit_and_undoes_them(mode):
    X, y = make_sparse_selection(64, T, D, Q, random_state=0)

    def make(seed, at=None):
        return SparseTokenTransformer(pe_dim=8, n_pe_draws=1, max_epochs=3, batch_size=16,
                                      random_state=seed, device="cpu",
                                      callbacks=[_Interrupt(at)] if at else None)

    seen = []

    def stop_all(exc):
        seen.append(str(exc))
        return True

    nets = [make(0), make(1, at=1), make(2)]
    with pytest.raises(KeyboardInterrupt, match="interrupted at epoch 1"):
        fit_group(nets, [(X, y)] * 3, trainer=mode, stop_all=stop_all)
    assert seen == ["interrupted at epoch 1"]
    assert not any(net.initialized_ for net in nets)  # every fit undone
    # stop_all False: the interrupted fit ends as a lone fit does, the others go on
    nets = [make(0), make(1, at=1), make(2)]
    assert fit_group(nets, [(X, y)] * 3, trainer=mode, stop_all=lambda exc: False) == [None] * 3
    assert [len(net.history_) for net in nets] == [3, 1, 3]
    assert len(make(1, at=1).fit(X, y).history_) == 1
    with pytest.raises(ValueError, match="stop_all must be None or a callable"):
        fit_group(nets, [(X, y)] * 3, stop_all=True)


def test_stop_all_stops_a_fit_that_is_not_grouped():
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)
    nets = [_MyFCN(hidden_width=8, max_epochs=3, batch_size=16, random_state=0,
                   callbacks=[_Interrupt(2)]),
            SparseTokenFCN(hidden_width=8, max_epochs=3, batch_size=16, random_state=1)]
    with pytest.raises(KeyboardInterrupt, match="interrupted at epoch 2"):
        fit_group(nets, [(X, y)] * 2, stop_all=lambda exc: True)
    assert not nets[0].initialized_ and not nets[1].initialized_  # the group never began


# -- what fit_group refuses before any fit --------------------------------------------------

def _task():
    return make_sparse_selection(32, T, D, Q, random_state=0)


def test_one_estimator_twice_is_refused():
    X, y = _task()
    net = SparseTokenFCN(hidden_width=4, max_epochs=1)
    with pytest.raises(ValueError, match=r"estimators\[0\] and estimators\[1\] are the same "
                                         r"estimator.*sklearn.base.clone"):
        fit_group([net, net], [(X, y)] * 2)
    assert not hasattr(net, "module_")


def test_a_class_for_an_estimator_is_refused():
    X, y = _task()
    with pytest.raises(ValueError, match=re.escape(
            "estimators[0] is the class SparseTokenFCN, not an estimator: pass an instance, "
            "e.g. SparseTokenFCN(...).")):
        fit_group([SparseTokenFCN], [(X, y)])


@pytest.mark.parametrize("how", ["X alone", "with weights"])
def test_data_that_is_not_a_pair_is_refused(how):
    X, y = _task()
    net = SparseTokenFCN(hidden_width=4, max_epochs=1)
    item, got = (X, "a ndarray") if how == "X alone" else ((X, y, np.ones(len(X))),
                                                           "a tuple of 3")
    with pytest.raises(ValueError, match=re.escape(
            f"data[0] must be a pair (X, y) (y None for a SparseSelectionStream); got {got}. "
            "Pass [(X, y), ...]; sample weights are not supported.")):
        fit_group([net], [item])
    assert not hasattr(net, "module_")


# -- the fused step belongs to the estimator class ------------------------------------------

class _FusedFCN(SparseTokenFCN):
    """An FCN whose class declares a fused trainer: its own module's forward, stacked."""

    fused_trainer = StackedTrainer()


class _LoneTransformer(SparseTokenTransformer):
    """The paper's model, its class declaring that it trains alone."""

    fused_trainer = None


def test_the_estimator_class_says_how_it_trains():
    assert trainer_of(SparseTokenTransformer(), "fused") == "fused"
    assert trainer_of(SparseTokenTransformer(), "exact") == "exact"
    assert trainer_of(SparseTokenFCN(), "fused") == "exact"  # no fused trainer declared
    assert trainer_of(_LoneTransformer(), "fused") == "exact"
    assert trainer_of(_FusedFCN(), "fused") == "fused"
    # its own module only: a user's module may not run stacked
    assert trainer_of(SparseTokenTransformer(module=_MyAttention), "fused") == "exact"


class _MyAttention(SparseTokenAttention):
    """A user's module."""


def test_any_class_that_declares_a_fused_trainer_trains_fused():
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)

    def make(cls, lr, seed):
        return cls(hidden_width=8, lr=lr, max_epochs=2, batch_size=16, random_state=seed,
                   device="cpu")

    grid = [(0.01, 0), (0.03, 1)]
    nets = [make(_FusedFCN, lr, seed) for lr, seed in grid]
    assert fit_group(nets, [(X, y)] * 2, trainer="fused") == [None, None]
    for net, (lr, seed) in zip(nets, grid):
        lone = make(_FusedFCN, lr, seed).fit(X, y)
        for a, b in zip(net.module_.parameters(), lone.module_.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(net.predict(X), lone.predict(X), rtol=1e-5, atol=1e-6)


# -- the stacked step: persistent stacked weights, one Adam with each model's settings ----

class _Weights(Callback):
    """Record the module's weights at every epoch's end (a callback reading them mid-fit)."""

    def on_train_begin(self, net, **kwargs):
        self.seen_ = []

    def on_epoch_end(self, net, **kwargs):
        self.seen_.append(net.module_.W.detach().clone())


def _transformer(lr, seed, **params):
    return SparseTokenTransformer(pe_dim=8, n_pe_draws=1, lr=lr, max_epochs=3, batch_size=16,
                                  random_state=seed, device="cpu", **params)


def test_fused_adam_takes_each_models_own_settings_and_callbacks_see_its_weights():
    X, y = make_sparse_selection(64, T, D, Q, random_state=0)
    settings = [dict(optimizer__weight_decay=0.01), dict(optimizer__betas=(0.8, 0.99)),
                dict(optimizer__eps=1e-4, lr_schedule="cosine"), {}]

    def make(i):
        return _transformer(0.01 * (i + 1), i, callbacks=[("weights", _Weights())],
                            **settings[i])

    nets = [make(i) for i in range(len(settings))]
    assert {trainer_of(net, "fused") for net in nets} == {"fused"}
    assert fit_group(nets, [(X, y)] * len(nets), trainer="fused") == [None] * len(nets)
    for i, net in enumerate(nets):
        lone = make(i).fit(X, y)
        assert_close_fit(net, lone, X)
        seen, expected = (dict(n.callbacks_)["weights"].seen_ for n in (net, lone))
        assert len(seen) == len(expected) == 3
        for a, b in zip(seen, expected):  # the weights of each epoch, not the group's
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_fits_end_with_weights_and_adam_state_of_their_own():
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)
    nets = [_transformer(lr, seed) for lr, seed in GRID]
    assert fit_group(nets, [(X, y)] * len(nets), trainer="fused") == [None] * len(nets)
    for net in nets:
        for tensor in [*net.module_.parameters(), *net.module_.buffers(),
                       *net.optimizer_.state[net.module_.W].values()]:
            # no view of the group's stacked tensors: its storage holds itself alone
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    # training on alone goes on as the lone fit's would (its Adam state is its own)
    X2, y2 = make_sparse_selection(32, T, D, Q, random_state=1)
    for net, (lr, seed) in zip(nets, GRID):
        lone = _transformer(lr, seed).fit(X, y)
        assert_close_fit(net.partial_fit(X2, y2), lone.partial_fit(X2, y2), X)


class _ClipGradients(Callback):
    """Reads the gradients: on_grad_computed."""

    def on_grad_computed(self, net, named_parameters, **kwargs):
        torch.nn.utils.clip_grad_norm_([p for _, p in named_parameters], 1.0)


@pytest.mark.parametrize("params", [
    dict(optimizer=torch.optim.SGD), dict(optimizer__amsgrad=True),
    dict(callbacks=[_ClipGradients()])], ids=["sgd", "amsgrad", "on_grad_computed"])
def test_what_the_stacked_step_cannot_make_trains_exactly(params):
    """Another optimizer, an Adam setting the stacked Adam has not, a callback on the
    gradients: the fit trains alone, bit for bit, and is said to."""
    X, y = make_sparse_selection(48, T, D, Q, random_state=0)
    nets = [_transformer(lr, seed, **params) for lr, seed in GRID[:2]]
    assert [trainer_of(net, "fused") for net in nets] == ["exact", "exact"]
    assert fit_group(nets, [(X, y)] * 2, trainer="fused") == [None, None]
    for net, (lr, seed) in zip(nets, GRID[:2]):
        assert_same_fit(net, _transformer(lr, seed, **params).fit(X, y), X)
