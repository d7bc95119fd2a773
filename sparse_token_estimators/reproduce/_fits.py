"""The one runner of a run: every (fit, seed) the store lacks, in one ``joblib.Parallel``.

A fit builds its seeded data (a fixed sample, a ``SparseSelectionStream``
for the population, or the first ``n_train`` sequences of a pool for a
learning curve), fits, evaluates and gives one record. A job
(:func:`group_job`) trains the fits of one group (:func:`group_key`: one model
and width, any rates and seeds): with ``trainer="exact"`` one after another,
each its lone fit (:func:`fit_job`); with "fused", side by side with
``fit_group`` where the estimator trains fused (its record then says
``"trainer": "fused"``); :func:`run_fits` sends one job per group (halving groups while workers
would be idle), keeps and stores each record as its job finishes
(``return_as="generator_unordered"``, any joblib backend: one task per group). Losses are squared
errors summed over the d coordinates; R^2 is ``r2_score`` averaged over them.
"""

import math
import time
import warnings

import numpy as np
from joblib import effective_n_jobs
from sklearn.metrics import r2_score
from sklearn.utils.parallel import Parallel, delayed

from .._group import fit_group, trainer_of
from ..callbacks import TrainingDivergedError, trace_steps
from ..datasets import SparseSelectionStream
from ._data import stream_seed, task
from ._models import MODELS, Fit, model_name, training, width_parameter

#: what the alignment record holds at each point
TRACE_KEYS = ("sequences_seen", "alignment", "w_scale")

__all__ = ["Fit", "fit_job", "group_job", "run_fits"]


def describe(fit, config, seed, trainer="exact"):
    """What every record of ``fit`` starts with: the model and its training (``trainer``:
    what trained it, ``trainer_of`` its estimator)."""
    return {
        "model": fit.model, "model_name": model_name(fit.model, config),
        "width": fit.model_width(config), width_parameter(fit.model): fit.width,
        "seq_len": fit.seq_len, "data": fit.data, "n_train": fit.training_size(config),
        "max_steps": fit.max_steps, "lr": fit.learning_rate(config),
        "lr_schedule": training(fit.model, config).lr_schedule, "seed": seed,
        "layout": _layout(fit),
        # a fused group's records equal the lone fits' to float rounding only: say so
        **({"trainer": "fused"} if trainer == "fused" else {}),
    }


def _loss_r2(model, X, y):
    pred = model.predict(X)
    per_sample = ((np.asarray(y, np.float64) - pred) ** 2).sum(axis=1)
    return per_sample, float(per_sample.mean()), float(r2_score(y, pred))


def evaluate(fit, config, seed, model, X_val, y_val):
    """The numbers the experiments read off one fitted ``model``: validation and
    held-out loss and R^2 at T, the training loss and the fit's CPU time."""
    _, val_loss, val_r2 = _loss_r2(model, X_val, y_val)
    per_sample, test_loss, test_r2 = _loss_r2(
        model, *task(config, fit.seq_len, config.n_test, "test", seed, _layout(fit)))
    history = model.history_
    return {
        "val_loss": val_loss, "val_r2": val_r2, "test_loss": test_loss, "test_r2": test_r2,
        "test_loss_se": float(per_sample.std(ddof=1) / math.sqrt(len(per_sample))),
        # skorch records the mean over the last epoch's batches of the
        # per-coordinate MSE; times d: summed over the coordinates
        "train_loss": float(history[-1, "train_loss"]) * config.token_dim,
        "fit_cpu_s": float(history[-1, "fit_cpu_s"]),
    }


def r2_by_length(fit, config, seed, model):
    """Held-out R^2 at each length of the dense grid (NaN where not scored: the named
    lengths only, but for the transformers of the indicator layout at ``length_pe_dim``;
    none for the FCN)."""
    scored = set(fit.scored_lengths(config))
    out = {}
    for L in config.length_grid() if fit.seq_len == config.seq_len else []:
        out[L] = math.nan
        if L in scored:
            X, y = task(config, L, config.n_length_test, "length", seed, _layout(fit))
            out[L] = float(r2_score(y, model.predict(X)))
    return out


def alignment_trace(fit, config, model):
    """A transformer's alignment record at the steps of ``trace_steps``, then the end."""
    if MODELS[fit.model].family != "transformer":
        return []
    recorded = {r["step"]: r for epoch in model.history_[:, "alignment_trace"] for r in epoch}
    if not recorded:
        return []
    steps = set(trace_steps(config.trace_steps_per_doubling, max(recorded)))
    trace = [{"step": step, **{k: float(recorded[step][k]) for k in TRACE_KEYS}}
             for step in sorted(recorded) if step in steps
             and not math.isnan(recorded[step]["alignment"])]
    end = {k: float(recorded[max(recorded)][k]) for k in TRACE_KEYS}
    if trace and end["sequences_seen"] > trace[-1]["sequences_seen"]:
        trace.append({"step": training(fit.model, config).steps(fit.training_size(config)),
                      **end})
    return trace


def _layout(fit):
    return MODELS[fit.model].layout


def _prepare(config, fit, seed, pool):
    """``(X, y, unfitted estimator)`` of ``fit`` for ``seed`` (``y`` None for a stream)."""
    layout = _layout(fit)
    if fit.max_steps:
        X, y = task(config, fit.seq_len, pool or fit.n_train, "pool", seed, layout)
        X, y = X[:fit.n_train], y[:fit.n_train]
    elif fit.data == "population":
        X, y = SparseSelectionStream(
            fit.seq_len, config.token_dim, config.n_selected,
            n_samples=fit.training_size(config), random_state=stream_seed(fit.seq_len, seed),
            device=config.device, layout=layout), None
    else:
        if fit.training_size(config) != config.n_train(fit.seq_len):
            raise ValueError("fits on a fixed sample of another size than n_train(T) "
                             "need max_steps (a learning curve)")
        X, y = task(config, fit.seq_len, config.n_train(fit.seq_len), "train", seed, layout)
    return X, y, fit.estimator(config, seed)


def _record(config, fit, seed, model, X, y, error, fit_s, trainer="exact"):
    """The record of ``fit`` for ``seed``: its fitted ``model`` scored, or the NaN record of
    a diverged one (``error``); ``fit_s``: the wall seconds its fit took; ``trainer``:
    what trained it."""
    start = time.perf_counter()
    record = describe(fit, config, seed, trainer)
    if isinstance(error, TrainingDivergedError) and fit.lr:
        # a rate of a search's grid too high for this width: it scores NaN (never
        # chosen), as a failed fit does in scikit-learn's searches
        nan = math.nan
        record.update(val_loss=nan, val_r2=nan, test_loss=nan, test_r2=nan,
                      test_loss_se=nan, train_loss=nan, fit_cpu_s=nan, fit_s=fit_s,
                      score_s=0.0, r2_by_length={}, trace=[],
                      error=f"{type(error).__name__}: {error}")
        return record
    if error is not None:
        raise error
    layout = _layout(fit)
    if fit.max_steps:
        X_test, y_test = task(config, fit.seq_len, config.n_test, "test", seed, layout)
        record.update(train_r2=float(r2_score(y, model.predict(X))),
                      test_r2=float(r2_score(y_test, model.predict(X_test))))
        # a learning curve's fit records its wall time alone (fit_cpu_s NaN, explained)
        scored = {"fit_cpu_s": math.nan}
    else:
        record.update(evaluate(fit, config, seed, model, *task(
            config, fit.seq_len, config.n_test, "validation", seed, layout)))
        scored = {"r2_by_length": r2_by_length(fit, config, seed, model),
                  "trace": alignment_trace(fit, config, model)}
    record.update(fit_s=fit_s, score_s=time.perf_counter() - start, **scored)
    return record


def fit_job(config, fit, seed, pool=0):
    """Fit ``fit`` for ``seed`` and return ``(fit, seed, record)`` (in a worker); ``pool``:
    a learning curve's pool size, whose first ``n_train`` sequences it trains on."""
    X, y, model = _prepare(config, fit, seed, pool)
    start, error = time.perf_counter(), None
    try:
        model.fit(X) if y is None else model.fit(X, y)
    except TrainingDivergedError as exc:
        error = exc
    return fit, seed, _record(config, fit, seed, model, X, y, error,
                              time.perf_counter() - start)


def group_job(config, members):
    """Fit the ``members`` (``(fit, seed, pool)``: one model and width, any rates and
    seeds) and return ``[(fit, seed, record)]``: with ``config.trainer`` "exact", each
    its lone fit (:func:`fit_job`); with "fused", side by side (``fit_group``), each
    record's ``fit_s`` an even share of the group's wall time."""
    if config.trainer == "exact":
        return [fit_job(config, fit, seed, pool) for fit, seed, pool in members]
    prepared = [_prepare(config, fit, seed, pool) for fit, seed, pool in members]
    # what fit_group trains each by (its one decision), for the records
    trainers = [trainer_of(model, config.trainer) for _, _, model in prepared]
    start = time.perf_counter()
    errors = fit_group([model for _, _, model in prepared],
                       [(X, y) for X, y, _ in prepared], trainer=config.trainer)
    for error in errors:  # what a lone fit_job would not have caught stops the run
        if error is not None and not isinstance(error, TrainingDivergedError):
            raise error
    fit_s = (time.perf_counter() - start) / len(members)
    return [(fit, seed, _record(config, fit, seed, model, X, y, error, fit_s, trainer))
            for (fit, seed, _), (X, y, model), error, trainer in zip(members, prepared, errors,
                                                                      trainers)]


def group_key(fit):
    """What the fits of one group share: all but the rate (and the seed)."""
    return (fit.model, fit.width, fit.seq_len, fit.data, fit.n_train, fit.max_steps)


def _jobs(config, todo, pools):
    """``todo`` as group jobs (lists of ``(fit, seed, pool)``), costliest first; groups
    are halved, largest first, until every worker has a job, where there are fewer."""
    groups = {}
    for fit, seed in todo:
        groups.setdefault(group_key(fit), []).append((fit, seed, pools.get(fit, 0)))
    jobs = list(groups.values())
    workers = effective_n_jobs(config.n_jobs)
    while len(jobs) < workers and max(len(job) for job in jobs) > 1:
        largest = max(jobs, key=len)
        jobs.remove(largest)
        jobs += [largest[:len(largest) // 2], largest[len(largest) // 2:]]
    # costliest first: the workers are not left idle behind one long job at the end
    return sorted(jobs, key=lambda job: -sum(fit.cost(config) for fit, _, _ in job))


def _pools(fits):
    """``{fit: pool size}`` of the learning curves' fits: the largest ``n_train`` of its
    curve (so a resumed curve draws the same pool)."""
    largest = {}
    for f in fits:
        if f.max_steps:
            key = (f.model, f.width, f.seq_len, f.data, f.max_steps)
            largest[key] = max(largest.get(key, 0), f.n_train)
    return {f: largest[f.model, f.width, f.seq_len, f.data, f.max_steps]
            for f in fits if f.max_steps}


def run_fits(config, fits, progress, store=None, *, label="fits"):
    """``{(fit, seed): record}`` of every distinct ``Fit`` in ``fits`` for each of its seeds
    (``Fit.seeds``: every seed of the run, the architectures experiment's for its models).

    A record in ``store`` (a ``RecordStore``) is read back, counted as done on
    ``progress``; the others are fitted, each saved there and counted as it
    finishes. ``label`` is what the progress display calls this batch.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE, Progress
    >>> records = run_fits(SMOKE, [Fit("fcn", 8, 4)], Progress(2, enabled=False))
    >>> sorted(seed for _, seed in records), sorted(records[Fit("fcn", 8, 4), 0])[:3]
    ([0, 1], ['data', 'fit_cpu_s', 'fit_s'])
    """
    fits = sorted(set(fits))
    records, todo = {}, []
    for fit in fits:
        for seed in fit.seeds(config):
            record = None if store is None else store.get(config, fit, seed)
            if record is None:
                todo.append((fit, seed))
            else:
                records[fit, seed] = record
    if records:
        progress.resume(len(records), sum(f.cost(config) for f, _ in records), label)
    if not todo:
        return records
    jobs = _jobs(config, todo, _pools(fits))
    progress.stage(label, n_fits=len(todo), cost=sum(f.cost(config) for f, _ in todo))
    outputs = Parallel(n_jobs=config.n_jobs, return_as="generator_unordered")(
        delayed(group_job)(config, job) for job in jobs)
    try:
        for done in outputs:
            for fit, seed, record in done:
                records[fit, seed] = record
                if store is not None:
                    store.put(config, fit, seed, record)
                progress.advance(cost=fit.cost(config))
    finally:
        with warnings.catch_warnings():
            # closing early is the point (an interrupt or a failed fit stops the
            # workers): joblib's advice about unused results is not for this
            warnings.filterwarnings("ignore", message=r".*tasks (have|which) .*",
                                    category=UserWarning)
            outputs.close()
    return records
