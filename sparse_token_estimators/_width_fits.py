"""The fits of one width of a critical-width search: made, scored, and their rates chosen.

The one place that dispatches fits (:func:`fit_all`: joblib, lone fits or a
fused group), the row of the table each fit gives (:func:`_scored_row`), the
train / validation split (:func:`split_data`), and :class:`WidthScores`, the
score function that :func:`~sparse_token_estimators._width_search.search_steps`'s
requests are answered with (a width's best mean score over the rates).
"""

import math
import numbers
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from sklearn.base import clone
from sklearn.model_selection import train_test_split

from ._group import fit_group, trainer_of
from ._sklearn_callbacks import fit_in
from ._width_search import times
from .datasets import SparseSelectionStream


class Interrupted(BaseException):
    """A KeyboardInterrupt inside a fit, carried past skorch.

    skorch's ``partial_fit`` catches a ``KeyboardInterrupt`` raised in its
    training loop and returns as if training were complete: a Ctrl-C (or a
    callback's interrupt) would truncate one fit, which the search would
    score, and go on with the next.
    """


def _designed_stop(exc):
    """Whether a KeyboardInterrupt is a callback's planned end of training."""
    from skorch.callbacks import EarlyStopping

    from .callbacks import StepBudget
    from .checkpoints import LoadInitState

    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return isinstance(tb.tb_frame.f_locals.get("self"), (EarlyStopping, StepBudget,
                                                          LoadInitState))


def _guard_interrupts(estimator):
    """Let a KeyboardInterrupt out of the estimator's training loop (a skorch net's)."""
    fit_loop = getattr(estimator, "fit_loop", None)
    if not callable(fit_loop):
        return

    def guarded(*args, **kwargs):
        try:
            return fit_loop(*args, **kwargs)
        except KeyboardInterrupt as exc:
            if _designed_stop(exc):
                raise
            raise Interrupted(str(exc)) from None

    estimator.fit_loop = guarded


def _fit_one(estimator, params, seed_param, seed, train, validation, test, scorer,
             error_score, task=None):
    """One fit and its scores: a row of the table (``task``: its task of scikit-learn's
    callbacks, or None)."""
    import torch

    estimator = clone(estimator).set_params(**params)
    _guard_interrupts(estimator)
    if seed_param is None:  # a net without random_state: seed torch in this worker
        torch.manual_seed(seed)
    return _scored_row(estimator, lambda: fit_in(task, estimator, lambda: estimator.fit(*train),
                                                 *train), validation, test, scorer, error_score)


def _scored_row(estimator, fit, validation, test, scorer, error_score, fit_time=0.0):
    """A row of the table: ``fit()`` (which fits ``estimator``, or raises its fit's
    error), then its scores; a diverged or failed fit scores ``error_score``, as in
    scikit-learn. ``fit_time`` adds to the time measured here."""
    row = {"val_score": math.nan, "test_score": None, "error": None}
    start = time.perf_counter()
    try:
        fit()
        row["val_score"] = float(scorer(estimator, *validation))
        if test is not None:
            row["test_score"] = float(scorer(estimator, *test))
    except Exception as exc:
        if isinstance(error_score, str):  # "raise"
            raise
        row["val_score"] = float(error_score)
        row["error"] = f"{type(exc).__name__}: {exc}"
        if test is not None:
            row["test_score"] = float(error_score)
    row["fit_time"] = fit_time + time.perf_counter() - start
    return row


def _stops_the_search(exc):
    """Whether a KeyboardInterrupt in a fit of a group stops the search (as
    ``_guard_interrupts`` does for a lone fit): all but a callback's planned stop."""
    return not _designed_stop(exc)


def _fit_group(estimator, settings, train, validation, test, scorer, error_score, trainer):
    """The rows of :func:`_fit_one` for every setting, the fits trained side by side
    (``fit_group(..., trainer="fused")``: equal to their lone fits to float rounding).

    A fit that fails (its error returned by ``fit_group``, or its scoring) gets
    the row of a failed lone fit; each ``fit_time`` is an even share of the
    group's wall time plus its own scoring's. An interrupt stops the group and
    the search, as in a lone fit.
    """
    nets = [clone(estimator).set_params(**params) for params, _ in settings]
    X, y = train[0], (train[1] if len(train) > 1 else None)
    start = time.perf_counter()
    try:
        errors = fit_group(nets, [(X, y)] * len(nets), trainer=trainer,
                           stop_all=_stops_the_search)
    except KeyboardInterrupt as exc:  # every fit of the group undone, none scored
        raise Interrupted(str(exc)) from None
    share = (time.perf_counter() - start) / len(nets)
    return [_scored_row(net, partial(_reraise, error), validation, test, scorer, error_score,
                        fit_time=share)
            for net, error in zip(nets, errors)]


def _reraise(error):
    """A group member's fit, already made: raise its error, if any."""
    if error is not None:
        raise error


def trains_groups(estimator, X, seed_param, n_jobs, trainer="fused"):
    """Whether a width's fits train as one fused group: ``trainer`` "fused" and an
    estimator that trains fused (``trainer_of``: its class says so), each fit seeded by
    its parameter, fits one at a time (``n_jobs`` None or 1, and no joblib backend
    running more), and training data whose draws do not depend on the order of the
    fits (a stream seeded by an int). Otherwise every fit is a lone fit ("exact")."""
    if trainer != "fused" or seed_param is None or effective_n_jobs(n_jobs) != 1:
        return False
    if isinstance(X, SparseSelectionStream) and not (
            X.random_state is None or isinstance(X.random_state, numbers.Integral)):
        return False  # a RandomState or Generator is consumed once per epoch of each fit
    return trainer_of(estimator, trainer) == "fused"


def fit_all(estimator, settings, seed_param, data, scorer, error_score, n_jobs, verbose,
             trainer=None, tasks=None):
    """Fit a clone of ``estimator`` per setting: their rows, in order.

    The one place that dispatches fits (joblib, so that
    ``joblib.parallel_config("dask")`` sends them to a cluster): with a
    ``trainer`` ("fused"), all of them as one group (one task), else one task
    per lone fit, in parallel. ``settings`` is a list of ``(params, seed)``;
    ``tasks`` their tasks of scikit-learn's callbacks (lone fits only), or None.
    """
    parallel = Parallel(n_jobs=n_jobs, verbose=max(0, verbose - 1))
    if trainer is not None:
        return parallel([delayed(_fit_group)(estimator, settings, *data, scorer, error_score,
                                             trainer)])[0]
    tasks = [None] * len(settings) if tasks is None else tasks
    return parallel(
        delayed(_fit_one)(estimator, params, seed_param, seed, *data, scorer, error_score, task)
        for (params, seed), task in zip(settings, tasks))


def _check_pair(value, name):
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        short = {"validation": "val", "test": "test"}[name]
        raise ValueError(f"{name} must be a pair (X_{short}, y_{short}) of arrays, or None; "
                         f"got {type(value).__name__}.")
    return tuple(value)


def split_data(X, y, validation, test, validation_fraction, random_state):
    validation, test = _check_pair(validation, "validation"), _check_pair(test, "test")
    if isinstance(X, SparseSelectionStream):
        if validation is None:
            raise ValueError(
                "Training on a SparseSelectionStream needs validation=(X_val, y_val): a "
                "stream cannot be split (draw one with make_sparse_selection and another "
                "random_state)."
            )
        return (X,), tuple(validation), test
    if y is None:
        raise ValueError("y is required with arrays X (None only with a stream).")
    if validation is None:
        X, X_val, y, y_val = train_test_split(X, y, test_size=validation_fraction,
                                              random_state=random_state)
        validation = (X_val, y_val)
    return (X, y), tuple(validation), test


def diverged(error):
    """Whether a failed fit's ``error`` (its row's text) is a divergence: the loss
    exploded, or the predictions the scoring needs came out inf or NaN."""
    return error.startswith("TrainingDivergedError") or "non-finite value" in error


def failures(rows, limit=3):
    errors = [f"lr={r['lr']:g}, seed={r['seed']}: {r['error']}" for r in rows if r["error"]]
    return "; ".join(errors[:limit]) + ("; ..." if len(errors) > limit else "")



@dataclass
class WidthScores:
    """A width's score, as a search asks for it: ``scores(request)``.

    A width's fits (every rate of ``rates`` x every seed, or for the steps
    check its chosen rate only), its best mean score over the rates and that
    rate; every fit's row goes to ``table``, the rates chosen to ``chosen``
    (steps multiplier -> width -> rate) and ``per_seed`` (steps multiplier ->
    width -> {seed: rate}). ``task``: the search's task of scikit-learn's
    callbacks.
    """

    estimator: object
    param: str
    rates: list
    seeds: tuple
    target: float
    lr_param: str
    steps_param: str
    seed_param: object
    base_steps: int
    data: tuple
    scorer: object
    error_score: object
    n_jobs: object
    verbose: int
    group: object
    task: object = None
    table: list = field(default_factory=list)
    chosen: dict = field(default_factory=dict)
    per_seed: dict = field(default_factory=dict)

    def fits(self, width, multiplier, lrs):
        """Fit ``width`` at ``multiplier`` times the steps for every rate of ``lrs`` and
        seed: ``[(lr, seed, val_score), ...]``; raises if every fit failed."""
        param, seeds, seed_param = self.param, self.seeds, self.seed_param
        jobs = [(lr, seed) for lr in lrs for seed in seeds]
        settings = [({param: width, self.lr_param: lr,
                      self.steps_param: self.base_steps * multiplier,
                      **({seed_param: seed} if seed_param else {})}, seed) for lr, seed in jobs]
        tasks = self.task.fits(f"{param}={width}, steps x{multiplier}", len(jobs))
        rows = [{"width": width, "lr": lr, "seed": seed, "steps_multiplier": multiplier, **row}
                for (lr, seed), row in zip(jobs, fit_all(
                    self.estimator, settings, seed_param, self.data, self.scorer,
                    self.error_score, self.n_jobs, self.verbose, self.group, tasks))]
        self.task.end_fits()
        self.table.extend(rows)
        if all(row["error"] for row in rows):
            steps = f" with {multiplier}x the steps" if multiplier != 1 else ""
            if all(diverged(row["error"]) for row in rows):
                raise ValueError(
                    f"All {len(rows)} fits of {param}={width}{steps} diverged (the training "
                    f"loss exploded, or the predictions came out inf or NaN) at every rate "
                    f"tried, lr in [{', '.join(f'{lr:g}' for lr in sorted(set(lrs)))}] "
                    f"(x seeds {seeds}): the rates are too high for this estimator. Pass "
                    f"smaller ones, e.g. lr_grid="
                    f"[{', '.join(f'{r / 100:g}' for r in self.rates)}]; the first: "
                    f"{failures(rows, limit=1)}")
            raise ValueError(
                f"All {len(rows)} fits of {param}={width}{steps} failed (rates x seeds), so "
                f"the search cannot score it; the first: {failures(rows)}. Fix the estimator "
                "or the data, or pass error_score='raise' to see the whole traceback."
            )
        return [(lr, seed, row["val_score"]) for (lr, seed), row in zip(jobs, rows)]

    def __call__(self, request):
        """The score of a search's request (a ``_width_search.Request``)."""
        width, multiplier, check = request
        param, rates, verbose = self.param, self.rates, self.verbose
        # the rates chosen at the search's own steps (the check's are half its own)
        own = self.chosen.setdefault(multiplier // 2 if check else multiplier, {})
        steps = f" with {times(multiplier)}" if multiplier != 1 else ""
        if check:  # the steps check: the chosen rate only
            if own[width] is None:
                return math.nan
            score = float(np.mean([s for _, _, s in self.fits(width, multiplier,
                                                               [own[width]])]))
            if verbose > 0:
                print(f"critical_width: {param}={width}{steps}: {score:.4g} "
                      f"(lr={own[width]:g})", flush=True)
            return score
        results = self.fits(width, multiplier, rates)
        means = {lr: float(np.mean([s for r, _, s in results if r == lr])) for lr in rates}
        finite = {lr: m for lr, m in means.items() if not math.isnan(m)}
        own[width] = max(finite, key=finite.get) if finite else None
        own_seed = self.per_seed.setdefault(multiplier, {})[width] = {}
        for seed in self.seeds:
            by_rate = {r: s for r, sd, s in results if sd == seed and not math.isnan(s)}
            own_seed[seed] = max(by_rate, key=by_rate.get) if by_rate else None
        score = finite[own[width]] if finite else math.nan
        if verbose > 0:
            best = f" (lr={own[width]:g})" if finite else " (no rate without a failure)"
            print(f"critical_width: {param}={width}{steps}: {score:.4g}{best}, target "
                  f"{self.target}", flush=True)
        return score
