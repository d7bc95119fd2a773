import math
import pickle

import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators.callbacks import AlignmentRecorder, StepBudget, trace_steps
from sparse_token_estimators.theory import identity_alignment


@pytest.fixture(scope="module")
def task():
    return make_sparse_selection(1500, 8, 4, 2, random_state=0)


@pytest.fixture(scope="module")
def fitted(task):
    est = SparseTokenTransformer(pe_dim=16, max_epochs=6, random_state=0,
                                 callbacks=[AlignmentRecorder()])
    return est.fit(*task)


def test_one_value_per_epoch_ending_at_the_fitted_W(fitted):
    alignment = fitted.history_[:, "alignment"]
    scale = fitted.history_[:, "w_scale"]
    assert len(alignment) == len(scale) == 6
    assert alignment[-1] == pytest.approx(identity_alignment(fitted.module_.W))
    assert scale[-1] == pytest.approx(float(fitted.module_.W.detach().diagonal().mean()))


def test_stochastic_alignment_rises(fitted):
    alignment = fitted.history_[:, "alignment"]
    assert alignment[-1] > 0.8
    assert fitted.history_[:, "w_scale"][-1] > fitted.history_[:, "w_scale"][0] > 0


def test_custom_keys_and_no_scale(task):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=2, random_state=0,
                                 callbacks=[AlignmentRecorder(key="cos", scale_key=None)])
    est.fit(*task)
    assert len(est.history_[:, "cos"]) == 2
    assert "w_scale" not in est.history_[-1]


def test_fcn_has_no_W(task):
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, callbacks=[AlignmentRecorder()])
    with pytest.raises(ValueError, match="square matrix module_.W"):
        est.fit(*task)


def test_pickles_and_clones_with_the_estimator(fitted, task):
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored.history_[:, "alignment"] == fitted.history_[:, "alignment"]
    refit = clone(fitted).fit(*task)  # same random_state: the same curve again
    assert refit.history_[:, "alignment"] == pytest.approx(fitted.history_[:, "alignment"])


def test_trace_starts_at_zero_from_w_zero(fitted, task):
    # 1500 sequences in batches of 256: 6 steps per epoch, 36 in all
    trace = [r for epoch in fitted.history_[:, "alignment_trace"] for r in epoch]
    assert trace[0] == {"step": 0, "sequences_seen": 0, "alignment": 0.0, "w_scale": 0.0}
    steps = [r["step"] for r in trace]
    assert steps == sorted(set(steps))
    # the log-spaced steps, and every epoch's end
    assert set(trace_steps(2, 36)) | {6 * k for k in range(1, 7)} == set(steps)
    seen = {r["step"]: r["sequences_seen"] for r in trace}
    assert seen[6] == 1500 and seen[8] == 2012 and seen[36] == 9000
    # each epoch's list ends where the epoch ends, at that epoch's alignment
    for epoch in fitted.history_:
        assert epoch["alignment_trace"][-1]["alignment"] == epoch["alignment"]
    # one Adam step from 0 already points towards I, and the alignment rises
    assert 0 < trace[1]["alignment"] < trace[-1]["alignment"]


def test_trace_continues_with_warm_start(task):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=1, warm_start=True, random_state=0,
                                 callbacks=[AlignmentRecorder()])
    est.fit(*task)
    est.fit(*task)
    trace = [r for epoch in est.history_[:, "alignment_trace"] for r in epoch]
    assert [r["step"] for r in trace] == [0, 1, 2, 3, 4, 6, 8, 11, 12]
    assert trace[-1]["sequences_seen"] == 3000
    assert [r["step"] for r in trace].count(0) == 1


def test_no_trace_when_disabled(task):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=1, random_state=0,
                                 callbacks=[AlignmentRecorder(trace_key=None)])
    est.fit(*task)
    assert "alignment_trace" not in est.history_[-1]
    assert len(est.history_[:, "alignment"]) == 1


# -- StepBudget -----------------------------------------------------------------------


def steps_taken(est):
    """Training batches in history_, counted batch by batch."""
    return sum(len(epoch["batches"]) for epoch in est.history_)


def budgeted(max_steps, **kwargs):
    kwargs = {"max_epochs": 1000, **kwargs}
    return SparseTokenFCN(hidden_width=8, batch_size=100, random_state=0,
                          callbacks=[StepBudget(max_steps)], **kwargs)


@pytest.mark.parametrize("n", [50, 300, 1500])
def test_budget_gives_every_training_set_the_same_steps(task, n):
    X, y = task
    est = budgeted(25).fit(X[:n], y[:n])
    assert steps_taken(est) == est.history_[-1, "train_steps"] == 25
    # the same steps: one of 50 sequences 25 epochs, 1500 sequences 2 epochs
    assert len(est.history_) == -(-25 // -(-n // 100))


def test_budget_inside_an_epoch_leaves_no_empty_batch(task):
    X, y = task  # 1500 sequences: 15 steps an epoch, the budget of 20 ends inside epoch 2
    est = budgeted(20).fit(X, y)
    assert len(est.history_) == 2 and len(est.history_[-1]["batches"]) == 5
    assert all("train_loss" in b for b in est.history_[-1]["batches"])
    assert "train_loss" not in est.history_[-1]  # the interrupted epoch has no epoch score
    assert est.predict(X[:3]).shape == (3, 4)  # fitted: the model after step 20


def test_budget_at_an_epoch_end_ends_that_epoch(task):
    X, y = task
    est = budgeted(30).fit(X, y)  # two whole epochs of 15 steps
    assert len(est.history_) == 2 and est.history_[-1, "train_batch_count"] == 15
    assert "train_loss" in est.history_[-1]


def test_budget_beyond_max_epochs_stops_at_max_epochs(task):
    X, y = task
    est = budgeted(1000, max_epochs=2).fit(X, y)
    assert steps_taken(est) == est.history_[-1, "train_steps"] == 30


def test_budget_counts_per_fit_and_clones(task):
    X, y = task
    est = budgeted(7, warm_start=True)
    est.fit(X, y)
    est.fit(X, y)  # continued training: another budget of 7
    assert steps_taken(est) == 14
    refit = clone(est).set_params(warm_start=False).fit(X, y)
    assert steps_taken(refit) == 7
    assert pickle.loads(pickle.dumps(refit)).history_[-1, "train_steps"] == 7


@pytest.mark.parametrize("max_steps, error", [(0, ValueError), (2.5, TypeError)])
def test_budget_refuses_a_bad_number_of_steps(task, max_steps, error):
    with pytest.raises(error, match="max_steps must be an integer >= 1"):
        budgeted(max_steps).fit(*task)


# -- the learning-rate schedule (lr_schedule, CosineSchedule) ----------------------


def _cosine(k, n, base):
    return base * (1 + math.cos(math.pi * k / n)) / 2


@pytest.mark.parametrize("estimator", [
    SparseTokenFCN(hidden_width=8),
    SparseTokenTransformer(pe_dim=8, n_pe_draws=1),
    SparseTokenEncoder(d_model=8, n_heads=1),
    SparseTokenRNN(hidden_size=8),
])
def test_cosine_rate_follows_the_cosine_per_batch_down_to_zero(task, estimator):
    X, y = task[0][:200], task[1][:200]  # 200 sequences in batches of 64: 4 steps an epoch
    est = clone(estimator).set_params(lr=0.02, lr_schedule="cosine", batch_size=64,
                                      max_epochs=3, random_state=0)
    real = []
    original = est.notify

    def spy(method_name, **kwargs):  # the rate the optimizer steps with, batch by batch
        if method_name == "on_batch_end" and kwargs.get("training"):
            real.append(est.optimizer_.param_groups[0]["lr"])
        return original(method_name, **kwargs)

    est.notify = spy
    est.fit(X, y)
    rates = [lr for epoch in est.history_[:, "batches", :, "event_lr"] for lr in epoch]
    n = 12
    assert rates == pytest.approx([_cosine(k, n, 0.02) for k in range(n)])
    assert real == pytest.approx(rates)
    assert rates[-1] < 0.02 * 0.02 and _cosine(n, n, 0.02) == pytest.approx(0)
    # set back to the full rate: a later partial_fit runs its own cosine from lr
    assert est.optimizer_.param_groups[0]["lr"] == 0.02


def test_cosine_over_a_stream_and_within_a_step_budget():
    stream = SparseSelectionStream(8, 4, 2, n_samples=96, random_state=0)
    est = SparseTokenFCN(hidden_width=8, lr=0.01, lr_schedule="cosine", batch_size=32,
                         max_epochs=2, random_state=0).fit(stream)
    rates = [lr for epoch in est.history_[:, "batches", :, "event_lr"] for lr in epoch]
    assert rates == pytest.approx([_cosine(k, 6, 0.01) for k in range(6)])
    X, y = make_sparse_selection(96, 8, 4, 2, random_state=0)
    est = SparseTokenFCN(hidden_width=8, lr=0.01, lr_schedule="cosine", batch_size=32,
                         max_epochs=10, callbacks=[StepBudget(4)], random_state=0).fit(X, y)
    rates = [lr for epoch in est.history_[:, "batches", :, "event_lr"] for lr in epoch]
    assert rates == pytest.approx([_cosine(k, 4, 0.01) for k in range(4)])


def test_constant_schedule_changes_nothing(task):
    X, y = task[0][:300], task[1][:300]
    default = SparseTokenFCN(hidden_width=8, max_epochs=3, random_state=0).fit(X, y)
    constant = SparseTokenFCN(hidden_width=8, max_epochs=3, random_state=0,
                              lr_schedule="constant").fit(X, y)
    cosine = SparseTokenFCN(hidden_width=8, max_epochs=3, random_state=0,
                            lr_schedule="cosine").fit(X, y)
    assert (default.predict(X) == constant.predict(X)).all()
    assert "event_lr" not in default.history_[-1]["batches"][-1]
    assert not (default.predict(X) == cosine.predict(X)).all()


def test_schedule_is_an_ordinary_parameter(task):
    est = SparseTokenFCN(hidden_width=8, lr_schedule="cosine")
    assert est.get_params()["lr_schedule"] == "cosine"
    assert clone(est).lr_schedule == "cosine"
    assert pickle.loads(pickle.dumps(est)).lr_schedule == "cosine"
    assert SparseTokenFCN().lr_schedule == "constant"
    X, y = task[0][:200], task[1][:200]
    search = GridSearchCV(SparseTokenFCN(hidden_width=8, max_epochs=2, random_state=0),
                          {"lr_schedule": ["constant", "cosine"]}, cv=2).fit(X, y)
    assert [p["lr_schedule"] for p in search.cv_results_["params"]] == ["constant", "cosine"]
    assert search.best_estimator_.lr_schedule in ("constant", "cosine")


@pytest.mark.parametrize("value", ["cos", "linear", None, 1])
def test_bad_schedule_is_refused_before_anything_is_built(task, value):
    est = SparseTokenFCN(hidden_width=8, lr_schedule=value)
    with pytest.raises(ValueError, match="lr_schedule.*'constant'.*'cosine'"):
        est.fit(*task)
    assert not hasattr(est, "module_")


@pytest.mark.parametrize("mode", ["exact", "fused"])
def test_cosine_schedule_in_a_group_is_that_of_each_lone_fit(task, mode):
    from sparse_token_estimators._group import fit_group

    X, y = task[0][:256], task[1][:256]

    def make(lr, seed):
        return SparseTokenTransformer(pe_dim=8, n_pe_draws=1, lr=lr, lr_schedule="cosine",
                                      max_epochs=3, batch_size=64, random_state=seed)

    nets = [make(lr, seed) for lr in (0.003, 0.03) for seed in (0, 1)]
    fit_group(nets, [(X, y)] * len(nets), trainer=mode)
    for net, (lr, seed) in zip(nets, [(lr, s) for lr in (0.003, 0.03) for s in (0, 1)]):
        lone = make(lr, seed).fit(X, y)
        assert net.history_[:, "batches", :, "event_lr"] == \
            lone.history_[:, "batches", :, "event_lr"]
        assert net.predict(X) == pytest.approx(lone.predict(X), abs=1e-5)


# -- the cosine beside skorch's scheduling ---------------------------------------------


def _small_fcn(**params):
    from sparse_token_estimators import SparseTokenFCN

    return SparseTokenFCN(**{"hidden_width": 8, "lr": 0.01, "max_epochs": 4,
                             "batch_size": 16, "random_state": 0, **params})


def _small_task():
    from sparse_token_estimators import make_sparse_selection

    return make_sparse_selection(64, 5, 2, n_selected=2, random_state=0)


def test_the_cosine_beside_an_lr_scheduler_callback_is_refused_naming_both():
    import torch
    from skorch.callbacks import LRScheduler

    est = _small_fcn(lr_schedule="cosine", callbacks=[
        ("steps", LRScheduler(torch.optim.lr_scheduler.StepLR, step_size=1))])
    X, y = _small_task()
    with pytest.raises(ValueError, match=r"lr_schedule='cosine' and the callback 'steps' "
                                         r"\(skorch's LRScheduler\) would both set the "
                                         r"learning rate.*lr_schedule='constant'.*remove "
                                         r"'steps'"):
        est.fit(X, y)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):  # a refused fit leaves it as it was: unfitted
        est.predict(X)


def test_a_resumed_fit_continues_the_cosine_from_the_history(tmp_path):
    from skorch.callbacks import Callback

    from sparse_token_estimators.checkpoints import Checkpoint, LoadInitState

    X, y = _small_task()
    whole = _small_fcn(lr_schedule="cosine").fit(X, y)

    class StopAfterTwo(Callback):  # skorch ends a fit cleanly on a KeyboardInterrupt
        def on_epoch_end(self, net, **kwargs):
            if len(net.history) == 2:
                raise KeyboardInterrupt

    def run(*extra):
        cp = Checkpoint(monitor=None, dirname=str(tmp_path))
        return _small_fcn(lr_schedule="cosine",
                          callbacks=[cp, LoadInitState(cp, max_epochs=4), *extra]).fit(X, y)

    assert len(run(StopAfterTwo()).history_) == 2
    resumed = run()
    assert len(resumed.history_) == 4
    rates = whole.history_[:, "batches", :, "event_lr"]
    assert resumed.history_[:, "batches", :, "event_lr"] == rates  # not from the top again
    assert rates[2][0] < rates[0][0] / 1.5


def test_an_optimizer_state_saved_under_a_torch_scheduler_loads(tmp_path):
    """skorch's resume recipe: a torch scheduler adds 'initial_lr' to the param groups of
    the state saved; the same Adam loads it (it was refused as another optimizer's)."""
    import torch
    from skorch.callbacks import LRScheduler

    from sparse_token_estimators.checkpoints import Checkpoint, LoadInitState

    X, y = _small_task()

    def run():
        cp = Checkpoint(monitor=None, dirname=str(tmp_path))
        return _small_fcn(max_epochs=2, callbacks=[
            cp, LoadInitState(cp),
            LRScheduler(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)]).fit(X, y)

    assert run().history_[:, "event_lr"] == [0.01, 0.005]
    resumed = run()
    assert len(resumed.history_) == 4
    assert resumed.optimizer_.param_groups[0]["lr"] == pytest.approx(0.01 / 2 ** 4)


# -- what notify calls: the net's hooks and each callback that defines its own ------


def test_every_hook_a_callback_defines_runs_at_every_batch_and_epoch(task):
    """notify leaves out skorch's no-op hooks only: a user's callback, its hooks set
    on the class or on the instance, and a callback set mid-way all run."""
    from skorch.callbacks import Callback

    class Count(Callback):
        def _count(self, name):
            calls = self.__dict__.setdefault("calls_", {})
            calls[name] = calls.get(name, 0) + 1

        def on_batch_begin(self, net, **kwargs):
            self._count("on_batch_begin")

        def on_grad_computed(self, net, named_parameters, **kwargs):
            self._count("on_grad_computed")

        def on_epoch_end(self, net, **kwargs):
            self._count("on_epoch_end")

    X, y = task[0][:200], task[1][:200]  # 4 batches of 64, 3 epochs: 12 steps
    count, by_instance = Count(), Count()
    ends = []
    by_instance.on_batch_end = lambda net, **kwargs: ends.append(kwargs["training"])
    est = SparseTokenFCN(hidden_width=8, batch_size=64, max_epochs=3, random_state=0,
                         callbacks=[("count", count), ("by_instance", by_instance)]).fit(X, y)
    assert count.calls_ == {"on_batch_begin": 12, "on_grad_computed": 12, "on_epoch_end": 3}
    assert ends == [True] * 12
    assert len(est.history_) == 3 and all("train_loss" in row for row in est.history_)
    # a callback replaced between two calls is the one notified
    fresh = Count()
    est.set_params(callbacks__count=fresh).partial_fit(X, y)
    assert fresh.calls_["on_batch_begin"] == 12 and count.calls_["on_batch_begin"] == 12


def test_print_log_prints_only_when_verbose(task, capsys):
    """The silent print_log builds no table; verbose prints the header and each epoch,
    the header with the first row it prints (here a partial_fit's, after a silent fit)."""
    X, y = task[0][:200], task[1][:200]
    est = SparseTokenFCN(hidden_width=8, batch_size=64, max_epochs=2, random_state=0)
    est.fit(X, y)
    assert capsys.readouterr().out == ""
    est.verbose = 1  # as set_params would, without skorch's re-initialising
    est.partial_fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    assert "epoch" in lines[0] and "train_loss" in lines[0] and len(lines) == 4
    assert [line.split()[0] for line in lines[2:]] == ["3", "4"]
