"""critical_width: the search logic on fake estimators, one real small run."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import FitFailedWarning

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators._critical_width import bracket_critical_width, search_steps
from sparse_token_estimators.model_selection import CriticalWidth, critical_width

LRS = [0.001, 0.01, 0.1]
FITS = []  # the widths FakeNet was fitted at (fits run in this process)


class FakeNet(RegressorMixin, BaseEstimator):
    """Scores a deterministic function of (width, lr, max_epochs, random_state)."""

    def __init__(self, width=1, lr=0.01, max_epochs=10, random_state=0, curve=None):
        self.width, self.lr, self.max_epochs = width, lr, max_epochs
        self.random_state, self.curve = random_state, curve

    def fit(self, X, y=None):
        FITS.append(self.width)
        self.fitted_ = True
        return self

    def score(self, X, y):
        return self.curve(self.width, self.lr, self.max_epochs, self.random_state)


def _data():
    return np.zeros((20, 2, 2)), np.zeros((20, 1))


def _run(curve, **kwargs):
    X, y = _data()
    kwargs = {"lr_grid": LRS, "target": 0.8, "start": 4, "seeds": (0, 1), **kwargs}
    return critical_width(FakeNet(curve=curve), "width", X, y, **kwargs)


def _monotone(width, lr, epochs, seed):
    # crossing at 23 at the best rate 0.01; other rates need twice the width
    best = 23 if lr == 0.01 else 46
    return 0.9 if width >= best else 0.5 + 0.001 * width


def test_monotone_search_finds_the_crossing_and_the_rate():
    result = _run(_monotone)
    assert isinstance(result, CriticalWidth)
    assert result.status == "found" and result.width == 23 and result.bracket == (19, 23)
    assert result.chosen_lr[23] == 0.01
    assert result.chosen_lr_per_seed[23] == {0: 0.01, 1: 0.01}
    assert sorted(result.scores) == [4, 8, 16, 19, 23, 32]  # 32 is the confirmation
    # the steps check refitted both bracketing widths at the chosen rate only
    doubled = [r for r in result.table if r["steps_multiplier"] == 2]
    assert sorted({r["width"] for r in doubled}) == [19, 23]
    assert all(r["lr"] == result.chosen_lr[r["width"]] for r in doubled)
    assert len(result.table) == 6 * 3 * 2 + 2 * 2
    assert {"width", "lr", "seed", "steps_multiplier", "val_score", "test_score",
            "fit_time", "error"} <= set(result.table[0])


def test_the_score_is_the_best_rate_of_the_seed_mean():
    def curve(width, lr, epochs, seed):
        # seed 0 prefers 0.1, seed 1 prefers 0.001; 0.01 is best on average
        own = {0: {0.001: 0.0, 0.01: 0.85, 0.1: 0.9}, 1: {0.001: 0.9, 0.01: 0.85, 0.1: 0.0}}
        return own[seed][lr] if width >= 8 else 0.0

    result = _run(curve)
    assert result.chosen_lr[8] == 0.01 and result.scores[8] == pytest.approx(0.85)
    assert result.chosen_lr_per_seed[8] == {0: 0.1, 1: 0.001}


def test_a_passing_width_followed_by_a_failing_one_is_non_monotone():
    result = _run(lambda w, lr, e, s: 0.9 if 16 <= w < 20 else 0.1)
    assert result.status == "non-monotone" and result.width == 16
    assert "wider" in result.reason


def test_a_falling_score_stops_the_growth():
    result = _run(lambda w, lr, e, s: 0.79 - 0.1 * math.log2(w / 4), stop=1024)
    assert result.status == "non-monotone" and result.width is None
    assert max(result.scores) == 8  # stopped at the first fall, no overshoot to the stop


def test_beyond_the_stop_is_a_measurement_only_if_twice_the_steps_fail():
    never = _run(lambda w, lr, e, s: 0.1, stop=32)
    assert never.status == "> stop" and never.bracket == (32, None)
    assert never.doubled_scores == {32: 0.1}
    slow = _run(lambda w, lr, e, s: 0.9 if e >= 20 else 0.1, stop=32)
    assert slow.status == "unresolved" and "twice the steps" in slow.reason


def test_the_bracket_moving_under_twice_the_steps_is_unresolved():
    # with 20 epochs the crossing drops from 23 to 19
    result = _run(lambda w, lr, e, s: 0.9 if w >= (19 if e >= 20 else 23) else 0.1)
    assert result.status == "unresolved" and result.bracket == (19, 23)
    assert "19 reaches 0.8 with twice the steps" in result.reason


def test_start_passing_is_at_start():
    result = _run(lambda w, lr, e, s: 0.9)
    assert result.status == "at start" and result.width == 4 and result.bracket == (None, 4)


def test_a_failing_fit_scores_nan_and_is_recorded():
    def curve(width, lr, epochs, seed):
        if lr == 0.1:
            raise FloatingPointError("diverged")
        return 0.9 if width >= 8 else 0.1

    with pytest.warns(FitFailedWarning, match=r"8 of 28 fits failed and scored error_score=nan"
                      r" \(the first: lr=0.1, seed=0: FloatingPointError: diverged"):
        result = _run(curve)
    assert result.width == 8 and result.chosen_lr[8] in (0.001, 0.01)
    assert any(r["error"] == "FloatingPointError: diverged" for r in result.table)
    assert "8 of 28 fits failed" in result.reason
    with pytest.raises(FloatingPointError):
        _run(curve, error_score="raise")


@pytest.mark.parametrize("grid, match", [([0.01, 0.1], "at least 3"),
                                         ([0.01, 0.02, 0.05], "span at least 10x"),
                                         ([0, 0.1, 1], "positive")])
def test_the_rate_grid_must_be_the_protocols(grid, match):
    with pytest.raises(ValueError, match=match):
        _run(_monotone, lr_grid=grid)


def test_unknown_parameter_and_stream_without_validation_are_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="has no parameter 'depth'"):
        critical_width(FakeNet(curve=_monotone), "depth", X, y, lr_grid=LRS)
    stream = SparseSelectionStream(4, 2, 2, n_samples=64, random_state=0, device="cpu")
    with pytest.raises(ValueError, match="needs validation="):
        critical_width(SparseTokenFCN(), "hidden_width", stream, lr_grid=LRS)


def test_a_passing_start_shrinks_to_the_floor_and_brackets():
    result = _run(lambda w, lr, e, s: 0.9 if w >= 3 else 0.1, start=16, floor=1)
    assert result.status == "found" and result.bracket == (2, 3)
    assert sorted(result.scores) == [2, 3, 4, 8, 16]  # 16, 8, 4, 2 down; 3 between
    at_floor = _run(lambda w, lr, e, s: 0.9, start=16, floor=2)
    assert at_floor.status == "at start" and at_floor.bracket == (None, 2)
    assert "(the floor)" in at_floor.reason


@settings(max_examples=60, deadline=None)
@given(crossing=st.integers(1, 5000), start=st.integers(1, 64),
       refine=st.sampled_from([1.01, 2 ** 0.25, 2 ** 0.5, 2.0]))
def test_the_bracket_always_holds_the_crossing(crossing, start, refine):
    calls = []

    def evaluate(width, times):
        calls.append((width, times))
        return float(width >= crossing)

    found = bracket_critical_width(evaluate, start, target=0.5, refine=refine, floor=1)
    lower, upper = found["bracket"]
    if found["status"] == "at start":
        assert upper == 1 == crossing and lower is None
    else:
        assert found["status"] == "found" and lower < crossing <= upper
        assert upper / lower <= refine or upper - lower == 1
    once = [w for w, times in calls if times == 1]
    assert len(once) == len(set(once)) and all(isinstance(w, int) for w in once)


@pytest.mark.parametrize("kwargs, match", [
    ({"start": 0}, "start"), ({"start": 2.5}, "start"), ({"stop": 2}, "stop"),
    ({"floor": 9}, "floor"), ({"floor": 0}, "floor"), ({"factor": 1.0}, "factor"),
    ({"refine": 0.5}, "refine"),
])
def test_bad_search_arguments_are_refused(kwargs, match):
    args = {"start": 4, "target": 0.5, **kwargs}
    with pytest.raises(ValueError, match=match):
        next(search_steps(args.pop("start"), **args))


def test_the_search_alone_on_a_score_function():
    found = bracket_critical_width(lambda w, m: float(w >= 40), 5, target=0.5, stop=100)
    # 5, 10, 20, 40, then 28 and 33
    assert found["status"] == "found" and found["bracket"] == (33, 40)


def test_a_real_small_run_on_the_transformer_with_a_test_set():
    X, y = make_sparse_selection(600, 6, 2, 2, random_state=0)
    X_val, y_val = make_sparse_selection(200, 6, 2, 2, random_state=1)
    X_test, y_test = make_sparse_selection(200, 6, 2, 2, random_state=2)
    est = SparseTokenTransformer(max_epochs=4, n_pe_draws=1, device="cpu", batch_size=64)
    result = critical_width(est, "pe_dim", X, y, lr_grid=[0.005, 0.02, 0.08], target=0.6,
                            start=4, stop=32, seeds=(0,), validation=(X_val, y_val),
                            test=(X_test, y_test), n_jobs=1)
    assert result.status in ("found", "at start", "> stop", "unresolved", "non-monotone")
    first = [r for r in result.table if r["width"] == 4 and r["steps_multiplier"] == 1]
    assert len(first) == 3 and all(np.isfinite(r["test_score"]) for r in first)
    assert result.scores[4] == max(r["val_score"] for r in first)


def test_a_stream_trains_and_a_validation_set_scores():
    stream = SparseSelectionStream(4, 2, 2, n_samples=256, random_state=0, device="cpu")
    X_val, y_val = make_sparse_selection(100, 4, 2, 2, random_state=1)
    est = SparseTokenFCN(max_epochs=2, device="cpu")
    result = critical_width(est, "hidden_width", stream, lr_grid=[0.003, 0.01, 0.03],
                            target=0.99, start=4, stop=8, seeds=(0,),
                            validation=(X_val, y_val))
    assert result.bracket[0] == 8 and result.status in ("> stop", "unresolved")


@pytest.mark.parametrize("name, param", [("SparseTokenTransformer", "pe_dim"),
                                         ("SparseTokenFCN", "hidden_width"),
                                         ("SparseTokenEncoder", "d_model"),
                                         ("SparseTokenRNN", "hidden_size"),
                                         ("SparseTokenSSM", "d_model")])
def test_every_estimator_is_searched_by_its_width(name, param):
    import sparse_token_estimators

    X, y = make_sparse_selection(128, 4, 2, 2, random_state=0)
    est = getattr(sparse_token_estimators, name)(max_epochs=1, device="cpu")
    result = critical_width(est, param, X, y, lr_grid=[0.001, 0.01, 0.1], target=0.99,
                            start=4, stop=4, seeds=(0,), check_steps=False)
    assert result.bracket == (4, None) and result.status == "> stop"
    assert {row["width"] for row in result.table} == {4}
    assert all(row["error"] is None for row in result.table)


def test_a_users_skorch_net_is_searched_seeded_by_torch():
    import torch
    from skorch import NeuralNetRegressor

    class Mean(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4 * 3, width),
                                           torch.nn.ReLU(), torch.nn.Linear(width, 2))

        def forward(self, X):
            return self.net(X)

    X, y = make_sparse_selection(256, 4, 2, 2, random_state=0)
    net = NeuralNetRegressor(Mean, module__width=4, max_epochs=2, lr=0.01,
                             optimizer=torch.optim.Adam, train_split=None, verbose=0)
    kwargs = dict(lr_grid=[0.001, 0.01, 0.1], target=0.99, start=4, stop=8, seeds=(0, 1))
    first = critical_width(net, "module__width", X, y, **kwargs)
    again = critical_width(net, "module__width", X, y, **kwargs)
    assert [r["val_score"] for r in first.table] == [r["val_score"] for r in again.table]
    assert first.table[0]["val_score"] != first.table[1]["val_score"]  # seeds 0 and 1
    assert first.bracket[0] == 8


def test_searches_run_in_lock_step_one_request_each_per_round():
    from sparse_token_estimators._critical_width import run_searches, search_steps

    rounds = []

    def evaluate(jobs):
        rounds.append(jobs)
        return [float(w >= {"a": 10, "b": 40}[k]) for k, w, _ in jobs]

    found = run_searches(evaluate, {k: search_steps(8, target=0.5) for k in "ab"})
    alone = {k: bracket_critical_width(lambda w, m, k=k: float(w >= {"a": 10, "b": 40}[k]),
                                       8, target=0.5) for k in "ab"}
    assert found == alone
    assert all(len({k for k, _, _ in jobs}) == len(jobs) for jobs in rounds)
    assert len(rounds[0]) == 2


def test_a_validation_set_must_be_a_pair():
    X, y = _data()
    with pytest.raises(ValueError, match=r"validation must be a pair \(X_val, y_val\)"):
        critical_width(FakeNet(curve=_monotone), "width", X, y, lr_grid=LRS, validation=X)
    with pytest.raises(ValueError, match="target must be a finite number"):
        critical_width(FakeNet(curve=_monotone), "width", X, y, lr_grid=LRS, target="0.8")


def test_a_multiple_keeps_every_width_a_multiple_of_it():
    # rotary positions need an even d_model: the search never asks for an odd one
    found = bracket_critical_width(lambda w, m: float(w >= 23), 4, target=0.5, multiple=2)
    assert found["bracket"] == (22, 26) and found["status"] == "found"
    assert all(w % 2 == 0 for w in (*found["scores"], *found["doubled_scores"]))
    shrunk = bracket_critical_width(lambda w, m: float(w >= 5), 16, target=0.5, floor=2,
                                    multiple=2)
    assert shrunk["bracket"] == (4, 6) and all(w % 2 == 0 for w in shrunk["scores"])
    # the default is every integer: the bracket ends at neighbouring widths
    assert bracket_critical_width(lambda w, m: float(w >= 23), 4, target=0.5)["bracket"] \
        == (19, 23)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"start": 5}, "start=5: use multiples of 2"),
    ({"start": 4, "stop": 9}, "stop=9"),
    ({"start": 4, "floor": 1}, "floor=1"),
    ({"start": 4, "multiple": 0}, "multiple must be a positive int; got 0"),
])
def test_widths_that_are_not_multiples_are_refused(kwargs, fragment):
    kwargs = {"multiple": 2, **kwargs}
    with pytest.raises(ValueError, match=re.escape(fragment)):
        bracket_critical_width(lambda w, m: 1.0, target=0.5, **kwargs)


# -- refusals before any fit, failures, interrupts, progress ---------------------------


@pytest.mark.parametrize("kwargs, fragment", [
    ({"param": "lr"}, "four different parameters (the width, the rate, the steps and the "
                      "seed); param='lr' and lr_param='lr' name the same one"),
    ({"param": "max_epochs"}, "param='max_epochs' and steps_param='max_epochs'"),
    ({"seed_param": "width"}, "param='width' and seed_param='width' name the same one"),
    ({"param": "curve"}, None),  # None is a width left to the estimator: accepted
    ({"lr_grid": [0.001, 0.01, float("nan")]}, "finite positive learning rates"),
    ({"lr_grid": [0.001, 0.01, float("inf")]}, "finite positive learning rates"),
    ({"seeds": [0.7]}, "seeds must hold distinct ints, e.g. seeds=(0, 1, 2); got [0.7] "
                       "(0.7 is not an int)"),
    ({"seeds": 3}, "seeds must be a sequence of ints, e.g. seeds=(0, 1, 2)"),
    ({"seeds": [0, 0]}, "(a seed repeats)"),
    ({"seeds": []}, "(it is empty)"),
    ({"error_score": None}, "error_score must be 'raise' or a number"),
    ({"error_score": "bogus"}, "error_score must be 'raise' or a number"),
    ({"factor": "2"}, "factor must be a finite number > 1 (e.g. factor=2.0); got '2'"),
    ({"factor": float("inf")}, "factor must be a finite number > 1"),
    ({"refine": 1}, "refine must be a finite number > 1"),
    ({"fall_tol": -0.1}, "fall_tol must be None or a finite number >= 0"),
    ({"target": float("inf")}, "target must be a finite number"),
    ({"check_steps": "no"}, "check_steps must be True or False"),
])
def test_every_argument_is_checked_before_any_fit(kwargs, fragment):
    FITS.clear()
    net = FakeNet(curve=_monotone)
    before = net.get_params()
    if fragment is None:
        _run(_monotone, stop=8, **{k: v for k, v in kwargs.items() if k != "param"})
        return
    args = {"lr_grid": LRS, **kwargs}
    X, y = _data()
    with pytest.raises(ValueError, match=re.escape(fragment)):
        critical_width(net, args.pop("param", "width"), X, y, **args)
    assert FITS == [] and net.get_params() == before and not hasattr(net, "fitted_")


def test_a_width_that_is_not_an_int_and_an_object_that_is_no_estimator_are_refused():
    X, y = _data()
    with pytest.raises(ValueError, match=r"param='device' must be an int parameter of "
                                         r"SparseTokenFCN \(a width\); it is 'cpu'"):
        critical_width(SparseTokenFCN(device="cpu"), "device", X, y, lr_grid=LRS)
    with pytest.raises(TypeError, match="estimator must be a scikit-learn estimator .* got "
                                        "object"):
        critical_width(object(), "width", X, y, lr_grid=LRS)


def test_an_unreachable_target_ends_at_the_cap():
    calls = []
    found = bracket_critical_width(lambda w, m: calls.append(w) or 0.0, 4, target=0.5)
    assert found["status"] == "> stop" and found["bracket"] == (2 ** 20, None)
    assert len(calls) == 20  # 4, 8, ..., 2**20 and the steps check of the widest


def test_every_fit_of_a_width_failing_raises_with_the_first_errors():
    def broken(width, lr, epochs, seed):
        raise ValueError("X has token_dim 3, the estimator was fitted with 2")

    with pytest.raises(ValueError, match=re.escape(
            "All 6 fits of width=4 failed (rates x seeds), so the search cannot score it; the "
            "first: lr=0.001, seed=0: ValueError: X has token_dim 3, the estimator was fitted "
            "with 2; lr=0.001, seed=1: ")):
        _run(broken)


def test_validation_data_of_another_token_dim_fails_loudly():
    X, y = make_sparse_selection(64, 4, 2, 2, random_state=0)
    X_val, y_val = make_sparse_selection(32, 4, 3, 2, random_state=1)
    est = SparseTokenFCN(max_epochs=1, device="cpu")
    with pytest.raises(ValueError, match=r"All 3 fits of hidden_width=4 failed .* the first: "
                                         r"lr=0\.001, seed=0: ValueError: "):
        critical_width(est, "hidden_width", X, y, lr_grid=LRS, seeds=(0,), stop=8,
                       validation=(X_val, y_val))
    assert not est.initialized_


@pytest.mark.parametrize("n_heads, encoding, needed", [(2, "rope", 4), (1, "rope", 2),
                                                       (2, "none", 2), (1, "sinusoidal", 2),
                                                       (3, "sinusoidal", 6)])
def test_an_encoders_width_must_fit_its_heads_before_any_fit(n_heads, encoding, needed):
    from sparse_token_estimators import SparseTokenEncoder

    X, y = _data()
    est = SparseTokenEncoder(n_heads=n_heads, positional_encoding=encoding)
    with pytest.raises(ValueError, match=re.escape(
            f"SparseTokenEncoder's d_model must be a multiple of {needed} (")) as info:
        critical_width(est, "d_model", X, y, lr_grid=LRS, start=4, stop=64)
    assert f"Pass multiple={needed}, with start, stop and floor multiples" in str(info.value)
    assert not est.initialized_


def test_a_skorch_nets_width_must_be_set_in_its_constructor():
    import torch
    from skorch import NeuralNetRegressor

    X, y = _data()
    net = NeuralNetRegressor(torch.nn.Linear, lr=0.01, max_epochs=2)
    with pytest.raises(ValueError, match=re.escape(
            "NeuralNetRegressor has no parameter 'module__width': a skorch net lists a "
            "module's argument only when it is set in its constructor. Set it there, e.g. "
            "NeuralNetRegressor(..., module__width=4), then pass param='module__width'.")):
        critical_width(net, "module__width", X, y, lr_grid=LRS)


STARTED = []  # fits begun by the interrupting callbacks below
ENDED = []  # the epochs they ended


def _interrupting(how, kind="fcn"):
    from skorch.callbacks import Callback

    class Interrupt(Callback):
        def on_train_begin(self, net, **kwargs):
            STARTED.append(net.lr)

        def on_epoch_end(self, net, **kwargs):
            ENDED.append(len(net.history))
            if len(net.history) == 2:
                if how == "signal":  # a real Ctrl-C, delivered in this (the main) thread
                    import os
                    import signal
                    os.kill(os.getpid(), signal.SIGINT)
                raise KeyboardInterrupt

    if kind == "transformer":  # the paper's model: a group of it can train fused
        return SparseTokenTransformer(pe_dim=4, n_pe_draws=1, max_epochs=4, device="cpu",
                                      callbacks=[Interrupt()])
    return SparseTokenFCN(hidden_width=4, max_epochs=4, device="cpu", callbacks=[Interrupt()])


@pytest.mark.parametrize("trainer, kind", [("exact", "fcn"), ("fused", "transformer")])
@pytest.mark.parametrize("how", ["signal", "callback"])
def test_an_interrupt_stops_the_whole_search_and_propagates(how, trainer, kind, monkeypatch):
    """Lone fits ("exact") or a width's fits as a group ("fused"): a Ctrl-C or a
    callback's interrupt stops the search at once, and nothing is scored."""
    X, y = make_sparse_selection(64, 4, 2, 2, random_state=0)
    est = _interrupting(how, kind)
    STARTED.clear()
    ENDED.clear()
    with pytest.raises(KeyboardInterrupt, match="critical_width was interrupted during a fit"):
        critical_width(est, "pe_dim" if kind == "transformer" else "hidden_width", X, y,
                       lr_grid=LRS, seeds=(0, 1), stop=8,
                       trainer=trainer)
    if trainer == "exact":
        assert STARTED == [0.001]  # the first fit only: none after it, none scored
        assert ENDED == [1, 2]
    else:  # the fits of the first width begin together; none after them, none scored
        assert STARTED == [lr for lr in LRS for _ in (0, 1)]
        assert ENDED == [1] * 6 + [2]  # the group stops at once: no epoch after it
    assert not est.initialized_


def test_a_planned_stop_ends_a_fit_as_usual():
    from sparse_token_estimators.callbacks import StepBudget

    X, y = make_sparse_selection(64, 4, 2, 2, random_state=0)
    est = SparseTokenFCN(max_epochs=3, batch_size=32, device="cpu", callbacks=[StepBudget(2)])
    result = critical_width(est, "hidden_width", X, y, lr_grid=LRS, seeds=(0,), start=4,
                            stop=4, target=0.99, check_steps=False)
    assert result.status == "> stop" and all(row["error"] is None for row in result.table)


def test_verbose_reports_each_widths_score_as_it_is_found(capsys):
    result = _run(_monotone, verbose=1)
    lines = capsys.readouterr().out.splitlines()
    once = [line for line in lines if "twice" not in line]
    assert once == [f"critical_width: width={w}: {result.scores[w]:.4g} "
                    f"(lr={result.chosen_lr[w]:g}), target 0.8" for w in (4, 8, 16, 32, 23, 19)]
    assert len(lines) == len(once) + 2  # the steps check of both bracketing widths


def test_critical_width_is_importable_from_the_top_level():
    import sparse_token_estimators
    from sparse_token_estimators import critical_width as top

    assert top is critical_width and "critical_width" in sparse_token_estimators.__all__


# -- the fourth set: a non-monotone search is searched again with twice the steps ----------


def _slow_wide(width, lr, epochs, seed):
    """Made-up scores: at 10 epochs widths 16 to 19 pass and the wider ones are too slow to
    train (non-monotone); with 20 epochs every width from 12 on passes (monotone)."""
    if epochs >= 20:
        return 0.9 if width >= 12 else 0.1
    return 0.9 if 16 <= width < 20 else 0.1


def test_a_non_monotone_search_is_searched_again_with_twice_the_steps_and_resolved():
    found = bracket_critical_width(lambda w, m: _slow_wide(w, None, 10 * m, 0), 4,
                                   target=0.8, search_again=True)
    first, again = found["searches"]
    assert first["status"] == "non-monotone" and first["steps_multiplier"] == 1
    assert first["width"] == 16 and first["scores"][23] == 0.1  # 23 fails after 16 passed
    assert again["status"] == "found" and again["steps_multiplier"] == 2
    assert found["status"] == "found" and found["width"] == 13 and found["bracket"] == (11, 13)
    assert found["steps_multiplier"] == 2 and found["widths"] == {1: 16, 2: 13}
    assert found["settled"] and found["upper_bound"] == 13
    assert "searched again with twice the steps" in found["reason"]
    # the same scores without the rule: the first search, reported non-monotone
    alone = bracket_critical_width(lambda w, m: _slow_wide(w, None, 10 * m, 0), 4,
                                   target=0.8)
    assert alone["status"] == "non-monotone" and alone["widths"] == {1: 16}
    assert alone["searches"] == [first]


def test_critical_width_searches_again_by_default_its_check_with_four_times_the_steps():
    result = _run(_slow_wide)
    assert result.status == "found" and result.width == 13 and result.settled
    assert result.steps_multiplier == 2 and result.widths == {1: 16, 2: 13}
    assert [s["status"] for s in result.searches] == ["non-monotone", "found"]
    assert result.searches[0]["scores"][16] == 0.9 and result.scores[13] == 0.9
    by_steps = {m: {r["width"] for r in result.table if r["steps_multiplier"] == m}
                for m in (1, 2, 4)}
    assert by_steps[1] == set(result.searches[0]["scores"])  # the first search, every rate
    assert by_steps[2] == set(result.scores)  # the search again, every rate
    assert by_steps[4] == set(result.bracket)  # its steps check, at the chosen rate only
    assert all(r["lr"] == result.chosen_lr[r["width"]] for r in result.table
               if r["steps_multiplier"] == 4)
    assert result.chosen_lr == result.searches[1]["chosen_lr"]
    off = _run(_slow_wide, search_again=False)
    assert off.status == "non-monotone" and off.width == 16 and len(off.searches) == 1
    assert {r["steps_multiplier"] for r in off.table} == {1}


def test_non_monotone_again_with_twice_the_steps_is_unresolved():
    # widths 16 to 19 pass, the wider fail, whatever the steps
    found = bracket_critical_width(lambda w, m: 0.9 if 16 <= w < 20 else 0.1, 4, target=0.8,
                                   search_again=True)
    assert found["status"] == "non-monotone" and found["widths"] == {1: 16, 2: 16}
    assert not found["settled"] and found["upper_bound"] is None
    assert found["reason"].endswith("non-monotone again with twice the steps: unresolved")
    result = _run(lambda w, lr, e, s: 0.9 if 16 <= w < 20 else 0.1)
    assert result.status == "non-monotone" and not result.settled
    assert result.upper_bound is None and result.steps_multiplier == 2


def test_a_falling_score_with_nothing_passing_is_not_searched_again():
    # the rule is a width failing where a narrower one passed; here none passed
    result = _run(lambda w, lr, e, s: 0.79 - 0.1 * math.log2(w / 4), stop=1024)
    assert result.status == "non-monotone" and len(result.searches) == 1


def test_settled_and_the_upper_bound_of_each_status():
    found = _run(_monotone)
    assert (found.settled, found.upper_bound) == (True, 23)
    # a narrower width passes with twice the steps: unsettled, the width still bounds it
    unsettled = _run(lambda w, lr, e, s: 0.9 if w >= (19 if e >= 20 else 23) else 0.1)
    assert unsettled.status == "unresolved"
    assert (unsettled.settled, unsettled.upper_bound) == (False, 23)
    # the width found falls below the target with twice the steps: no bound
    falls = _run(lambda w, lr, e, s: 0.9 if w >= (31 if e >= 20 else 23) else 0.1)
    assert falls.status == "unresolved" and (falls.settled, falls.upper_bound) == (False, None)
    never = _run(lambda w, lr, e, s: 0.1, stop=32)
    assert (never.status, never.settled, never.upper_bound) == ("> stop", True, None)


def test_search_again_must_be_a_bool():
    with pytest.raises(ValueError, match="search_again must be True or False"):
        _run(_monotone, search_again="yes")


# -- refused before any fit, each naming the argument and the fix -----------------------


@pytest.mark.parametrize("n_jobs", ["2", 0, 1.5, True])
def test_an_n_jobs_that_is_no_nonzero_int_is_refused_before_any_fit(n_jobs):
    def no_fit(*args):
        raise AssertionError("a fit ran")

    with pytest.raises(ValueError, match=re.escape(
            f"n_jobs must be None or a non-zero int (as in joblib: 1 fits one at a time, 2 two "
            f"at once, -1 on every core); got {n_jobs!r}.")):
        _run(no_fit, n_jobs=n_jobs)


def test_the_estimators_class_is_refused_asking_for_an_instance():
    X, y = _data()
    with pytest.raises(TypeError, match=r"estimator must be an estimator instance, not the "
                                        r"class SparseTokenFCN: pass SparseTokenFCN\(\)"):
        critical_width(SparseTokenFCN, "hidden_width", X, y, lr_grid=LRS)


def test_a_gpu_device_without_a_gpu_is_refused_before_any_fit(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    X, y = make_sparse_selection(40, 4, 2, n_selected=2, random_state=0)
    with pytest.raises(ValueError, match=r"SparseTokenFCN's device='cuda' was requested but "
                                         r"no CUDA GPU is available.*no fit ran"):
        critical_width(SparseTokenFCN(device="cuda", max_epochs=1), "hidden_width", X, y,
                       lr_grid=LRS, seeds=(0,))


def test_every_rate_diverging_says_the_fits_diverged_and_names_the_rates():
    X, y = make_sparse_selection(100, 5, 2, n_selected=2, random_state=0)
    with pytest.raises(ValueError, match=re.escape(
            "All 3 fits of hidden_width=4 diverged (the training loss exploded, or the "
            "predictions came out inf or NaN) at every rate tried, lr in [1e+30, 1e+31, "
            "1e+32] (x seeds [0]): the rates are too high for this estimator. Pass smaller "
            "ones, e.g. lr_grid=[1e+28, 1e+29, 1e+30]; the first: lr=1e+30, seed=0:")):
        critical_width(SparseTokenFCN(max_epochs=1, device="cpu"), "hidden_width", X, y,
                       lr_grid=[1e30, 1e31, 1e32], seeds=(0,), start=4, stop=8)
