"""critical_width's ``trainer``: "exact", lone fits; "fused", a width's fits as one group.

"exact" makes no group: every fit is its lone fit (the paper's model, the FCN
on a stream, the GRU); fused groups of the paper's model give the table,
scores and width of lone fits to float rounding; a diverging rate,
error_score and "raise" behave as with lone fits; what cannot be grouped (an
estimator without a fused trainer, a user's skorch module, no seed parameter,
``n_jobs`` > 1, a stream consumed in order) is fitted alone. The interrupt
tests are in test_critical_width.py.
"""

import math
import re

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import FitFailedWarning

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    _group,
    _width_fits,
    make_sparse_selection,
)
from sparse_token_estimators.callbacks import TrainingDivergedError
from sparse_token_estimators.model_selection import critical_width

T, D, Q = 6, 3, 2
RATES = (0.01, 0.03, 0.1)


@pytest.fixture
def groups(monkeypatch):
    """The groups ``critical_width`` trains: (size, mode) of each ``fit_group`` call, and
    how many of them ran fused."""
    calls = {"groups": [], "fused": 0}
    real_fit_group, real_fused = _width_fits.fit_group, _group.StackedRound

    def spy(nets, data, **kwargs):
        calls["groups"].append((len(nets), kwargs["trainer"]))
        return real_fit_group(nets, data, **kwargs)

    def fused(*args, **kwargs):
        calls["fused"] += 1
        return real_fused(*args, **kwargs)

    monkeypatch.setattr(_width_fits, "fit_group", spy)
    monkeypatch.setattr(_group, "StackedRound", fused)
    return calls


def _lone(monkeypatch, *args, **kwargs):
    """``critical_width`` with every fit alone: ``trainer="exact"``."""
    return critical_width(*args, **{**kwargs, "trainer": "exact"})


def _rows(result):
    """The table without the fit times."""
    return [{k: v for k, v in row.items() if k != "fit_time"} for row in result.table]


def _summary(result):
    return (result.width, result.bracket, result.status, result.reason, result.scores,
            result.doubled_scores, result.chosen_lr, result.chosen_lr_per_seed)


#: estimator, its width, a stream (else arrays), target: each search visits several widths
CASES = {
    "paper's model": (SparseTokenTransformer(n_pe_draws=1, max_epochs=2, batch_size=32,
                                             device="cpu"), "pe_dim", False, 0.6),
    "FCN on a stream": (SparseTokenFCN(max_epochs=2, batch_size=32, device="cpu"),
                        "hidden_width", True, 0.3),
    "GRU": (SparseTokenRNN(max_epochs=2, batch_size=32, device="cpu"), "hidden_size", False,
            0.3),
}


@pytest.mark.parametrize("case", CASES)
def test_exact_makes_lone_fits(case, groups):
    est, param, stream, target = CASES[case]
    if stream:
        X, y = SparseSelectionStream(T, D, Q, n_samples=128, random_state=3, device="cpu"), None
    else:
        X, y = make_sparse_selection(160, T, D, Q, random_state=0)
    validation = make_sparse_selection(64, T, D, Q, random_state=1)
    kwargs = dict(lr_grid=RATES, seeds=(0, 1), start=2, stop=8, target=target,
                  validation=validation, test=make_sparse_selection(64, T, D, Q, random_state=2))
    result = critical_width(est, param, X, y, **kwargs)
    assert groups["groups"] == [] and groups["fused"] == 0  # no group: lone fits
    assert len({r["width"] for r in result.table}) >= 3
    row = result.table[-1]  # its score is that of the same fit made by hand
    lone = clone(est).set_params(**{param: row["width"], "lr": row["lr"],
                                    "random_state": row["seed"],
                                    "max_epochs": est.max_epochs * row["steps_multiplier"]})
    lone.fit(X) if y is None else lone.fit(X, y)
    assert row["val_score"] == lone.score(*validation)
    assert all(r["error"] is None and r["fit_time"] > 0 for r in result.table)
    assert not est.initialized_


def test_fused_groups_of_the_paper_s_model_equal_lone_fits_to_rounding(groups, monkeypatch):
    est = SparseTokenTransformer(n_pe_draws=2, max_epochs=2, batch_size=32, device="cpu")
    X, y = make_sparse_selection(160, T, D, Q, random_state=0)
    kwargs = dict(lr_grid=RATES, seeds=(0, 1), start=2, stop=8, target=0.6,
                  validation=make_sparse_selection(64, T, D, Q, random_state=1))
    fused = critical_width(est, "pe_dim", X, y, trainer="fused", **kwargs)
    assert groups["groups"] and all(mode == "fused" for _, mode in groups["groups"])
    assert groups["fused"] == len(groups["groups"])  # every group trained as one model
    alone = _lone(monkeypatch, est, "pe_dim", X, y, **kwargs)
    assert [(r["width"], r["lr"], r["seed"], r["steps_multiplier"]) for r in fused.table] == \
        [(r["width"], r["lr"], r["seed"], r["steps_multiplier"]) for r in alone.table]
    np.testing.assert_allclose([r["val_score"] for r in fused.table],
                               [r["val_score"] for r in alone.table], rtol=1e-4, atol=1e-5)
    assert (fused.width, fused.bracket, fused.status, fused.chosen_lr) == \
        (alone.width, alone.bracket, alone.status, alone.chosen_lr) == \
        (3, (2, 3), "found", alone.chosen_lr)


def test_a_fused_trainer_leaves_other_families_exact(groups, monkeypatch):
    est = SparseTokenFCN(max_epochs=1, batch_size=32, device="cpu")
    X, y = make_sparse_selection(128, T, D, Q, random_state=0)
    kwargs = dict(lr_grid=RATES, seeds=(0, 1), start=4, stop=4, check_steps=False)
    fused = critical_width(est, "hidden_width", X, y, trainer="fused", **kwargs)
    assert groups["groups"] == [] and groups["fused"] == 0
    assert _rows(fused) == _rows(_lone(monkeypatch, est, "hidden_width", X, y, **kwargs))


def _diverging():
    # SGD at lr=1e30 overflows in its first steps; the rates below it train
    return SparseTokenFCN(optimizer=torch.optim.SGD, max_epochs=2, batch_size=32, device="cpu")


def test_a_diverging_rate_fails_alone_as_in_lone_fits(groups, monkeypatch):
    X, y = make_sparse_selection(128, T, D, Q, random_state=0)
    kwargs = dict(lr_grid=(0.01, 0.1, 1e30), seeds=(0, 1), start=4, stop=8, target=0.99)
    with pytest.warns(FitFailedWarning) as grouped_warnings:
        grouped = critical_width(_diverging(), "hidden_width", X, y, **kwargs)
    assert groups["groups"] == []
    with pytest.warns(FitFailedWarning) as lone_warnings:
        alone = _lone(monkeypatch, _diverging(), "hidden_width", X, y, **kwargs)
    assert [str(w.message) for w in grouped_warnings] == [str(w.message) for w in lone_warnings]
    assert _rows(grouped) == _rows(alone)
    assert _summary(grouped) == _summary(alone)
    failed = [r for r in grouped.table if r["error"]]
    assert failed and all(r["lr"] == 1e30 and math.isnan(r["val_score"])
                          and r["error"].startswith("TrainingDivergedError: ") for r in failed)
    # a number as error_score, and "raise"
    with pytest.warns(FitFailedWarning, match="2 of 6 fits failed and scored error_score=-1"):
        scored = critical_width(_diverging(), "hidden_width", X, y, error_score=-1.0,
                                check_steps=False, **{**kwargs, "stop": 4})
    assert [r["val_score"] for r in scored.table if r["error"]] == [-1.0, -1.0]
    with pytest.raises(TrainingDivergedError):
        critical_width(_diverging(), "hidden_width", X, y, error_score="raise", **kwargs)


def test_a_width_whose_fits_all_fail_raises_as_with_lone_fits(groups, monkeypatch):
    X, y = make_sparse_selection(64, 4, 2, 2, random_state=0)
    X_val, y_val = make_sparse_selection(32, 4, 3, 2, random_state=1)  # another token_dim
    est = SparseTokenFCN(max_epochs=1, device="cpu")
    kwargs = dict(lr_grid=RATES, seeds=(0,), stop=8, validation=(X_val, y_val))
    messages = []
    for run in (critical_width, lambda *a, **k: _lone(monkeypatch, *a, **k)):
        with pytest.raises(ValueError, match=re.escape("All 3 fits of hidden_width=4 failed")) \
                as info:
            run(est, "hidden_width", X, y, **kwargs)
        messages.append(str(info.value))
    assert groups["groups"] == [] and messages[0] == messages[1]
    assert not est.initialized_


def test_what_cannot_be_grouped_is_fitted_alone(groups):
    import joblib
    from skorch import NeuralNetRegressor

    X, y = make_sparse_selection(128, 4, 2, 2, random_state=0)
    kwargs = dict(lr_grid=RATES, seeds=(0, 1), start=4, stop=4, check_steps=False)
    fcn = SparseTokenFCN(max_epochs=1, device="cpu")
    user = NeuralNetRegressor(torch.nn.Sequential, module__width=4, max_epochs=1, lr=0.01,
                              train_split=None, verbose=0)
    stream = SparseSelectionStream(4, 2, 2, n_samples=64, device="cpu",
                                   random_state=np.random.RandomState(0))
    paper = SparseTokenTransformer(max_epochs=1, device="cpu")
    assert _width_fits.trains_groups(paper, X, "random_state", None, "fused")
    assert not _width_fits.trains_groups(paper, X, "random_state", None, "exact")
    assert not _width_fits.trains_groups(fcn, X, "random_state", None, "fused")
    assert not _width_fits.trains_groups(user, X, "random_state", None, "fused")
    assert not _width_fits.trains_groups(paper, X, None, None, "fused")
    assert not _width_fits.trains_groups(paper, X, "random_state", 2, "fused")
    assert not _width_fits.trains_groups(paper, stream, "random_state", 1, "fused")
    with joblib.parallel_config("threading", n_jobs=2):  # a backend running 2 at once
        assert not _width_fits.trains_groups(paper, X, "random_state", None, "fused")
        result = critical_width(fcn, "hidden_width", X, y, **kwargs)
    with joblib.parallel_config("threading"):
        critical_width(fcn, "hidden_width", X, y, n_jobs=2, **kwargs)
    critical_width(fcn, "hidden_width", X, y, seed_param=None, **kwargs)
    assert groups["groups"] == []
    assert len(result.table) == 6 and all(r["error"] is None for r in result.table)


@pytest.mark.parametrize("trainer", ["lone", None, "Exact"])
def test_the_trainer_is_checked_before_any_fit(trainer, groups):
    X, y = make_sparse_selection(64, 4, 2, 2, random_state=0)
    est = SparseTokenFCN(max_epochs=1, device="cpu")
    with pytest.raises(ValueError, match=re.escape(
            f"trainer must be 'exact' (every fit alone, one after another: each its lone "
            f"fit, bit for bit; the default) or 'fused' (the fits of an estimator that "
            f"declares a fused_trainer, e.g. the paper's model, as one stacked model, equal "
            f"to lone fits to float rounding); got {trainer!r}.")):
        critical_width(est, "hidden_width", X, y, lr_grid=RATES, trainer=trainer)
    assert groups["groups"] == [] and not est.initialized_
