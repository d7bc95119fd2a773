"""``run``: fit what every experiment needs, once, and assess the claims."""

import platform
import time
from dataclasses import asdict

import numpy as np
import sklearn
import skorch
import torch
from joblib import effective_n_jobs

from ..theory import (
    fcn_lower_bound,
    fcn_width_threshold,
    transformer_pe_scale,
    uniform_attention_loss,
    zero_predictor_loss,
)
from ._config import QUICK
from ._dispatch import SerialExecutor, SimulatedExecutor, dispatch, process_executor, timed_job
from ._fits import _pools
from ._models import MODELS, describe_models
from ._plan import estimate
from ._progress import Progress
from ._records import RecordStore
from ._registry import EXPERIMENTS, planned_fits, selected  # noqa: F401 (re-exported)
from ._verdicts import FIXED_ON, RESOLUTION, SETS, THRESHOLDS, assess_claims


def _theory_references(config):
    """The theory's numbers for the configured task (losses summed over d)."""
    return {
        "fcn_lower_bound": fcn_lower_bound(config.seq_len, config.n_selected),
        "zero_predictor_loss": zero_predictor_loss(config.token_dim, config.n_selected),
        "uniform_attention_loss": uniform_attention_loss(
            config.seq_len, config.token_dim, config.n_selected),
        "fcn_width_threshold": fcn_width_threshold(config.seq_len, config.token_dim),
        "pe_scale": transformer_pe_scale(config.seq_len, config.n_selected),
    }


def run_searches(config, experiments, records, used_by, progress, *, executor=None,
                 job=timed_job):
    """``{experiment name: what its search returned}``, the searches run side by side
    (:func:`~._dispatch.dispatch`): each search's next round is asked for as soon as its
    own fits return; which searches run beside it changes the schedule, not a number.
    ``records`` and ``used_by`` are updated in place; ``executor`` (default: in this
    process) runs ``job(config, members)``."""
    return dispatch(config, [], experiments, records, used_by, progress,
                    executor=executor or SerialExecutor(), n_workers=_workers(executor),
                    job=job)


def _workers(executor, config=None):
    """How many jobs ``executor`` runs at once (``config.n_jobs`` for a process pool)."""
    if executor is None or isinstance(executor, SerialExecutor):
        return 1
    if isinstance(executor, SimulatedExecutor):
        return executor.n_workers
    workers = getattr(executor, "_max_workers", None)  # concurrent.futures' pools
    if workers:
        return workers
    client = getattr(executor, "_client", None)  # a Dask client's executor
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    return effective_n_jobs(config.n_jobs if config is not None else -1)


def executor_for(config):
    """``(executor, workers)`` of a run of ``config``: in this process for one job at a
    time (``n_jobs=1``), else a process pool of ``effective_n_jobs(n_jobs)`` workers."""
    workers = effective_n_jobs(config.n_jobs)
    return (SerialExecutor(), 1) if workers == 1 else (process_executor(workers), workers)


def run(config=QUICK, *, progress=True, store=None, executor=None, plan=None):
    """Run every experiment over ``config.n_seeds`` seeds and assess the claims.

    Each distinct fit is made once per seed (the architectures experiment's for its
    seeds alone, ``config.architecture_seeds()``), the searches' round by round.

    Parameters
    ----------
    config : ReproductionConfig, default=QUICK
    progress : bool or Progress, default=True
        Show a progress display on stderr, advanced as each fit finishes.
    store : str, path, RecordStore or None, default=None
        An output folder (or its ``RecordStore``): each fit's record is saved
        there as it finishes and read back by a rerun, with the same numbers;
        one made with another configuration is refused (``ValueError``).
    executor : concurrent.futures.Executor or None, default=None
        Where the fits run: None, a process pool of ``config.n_jobs`` workers (in this
        process for ``n_jobs=1``); e.g. ``client.get_executor()`` of a Dask client.
    plan : Plan or None, default=None
        The run's :class:`~._plan.Plan` (the progress display's time left from the first
        second; None: made here, without the machine's calibration).

    Returns
    -------
    results : dict
        ``config``, ``theory``, ``models``, one section per experiment,
        ``fits`` (a row per fit and seed), ``thresholds``, ``claims``,
        ``elapsed_s``, ``plan`` (the estimate made before the first fit), ``versions``.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> results = run(SMOKE, progress=False)
    >>> [c["claim"] for c in results["claims"]][:3]
    ['width separation', 'length generalisation', 'alignment']
    """
    if store is not None and not isinstance(store, RecordStore):
        store = RecordStore(store, config)
    used_by = planned_fits(config)
    if executor is None:
        executor, workers = executor_for(config)
    else:
        workers = _workers(executor, config)
    if plan is None:
        plan = estimate(config, workers)
    if not isinstance(progress, Progress):
        progress = Progress(sum(len(fit.seeds(config)) for fit in used_by),
                            enabled=bool(progress))
    progress.plan(sum(fit.cost(config) * len(fit.seeds(config)) for fit in used_by))
    progress.expect(plan.n_fits, plan.cpu_s / plan.factor, plan.wall_s)
    start, started_at = time.perf_counter(), time.time()
    records = {}

    def stamp(fit, seed, record):
        record.update(invocation=started_at, n_workers=workers)

    try:
        found = dispatch(config, list(used_by), selected(config), records, used_by, progress,
                         executor=executor, n_workers=workers, store=store,
                         pools=_pools(used_by), on_record=stamp)
    finally:
        progress.close()
    results = {
        "config": asdict(config),
        "theory": _theory_references(config),
        "models": describe_models(config, [m for m in MODELS
                                           if any(f.model == m for f in used_by)],
                                  searched={f.model for f in used_by if f.lr}),
    }
    for experiment in selected(config):
        results[experiment.name] = experiment.collect(config, records,
                                                      found.get(experiment.name))
    results["fits"] = [
        {**{k: v for k, v in record.items() if k not in ("r2_by_length", "trace")},
         "used_by": used_by[fit]}
        for (fit, seed), record in sorted(records.items())
    ]
    results["thresholds"] = {**THRESHOLDS, "fixed_on": FIXED_ON, "sets": dict(SETS),
                             "fixed_before_the_run": True, "resolution": dict(RESOLUTION)}
    results["claims"] = assess_claims(results)
    results["elapsed_s"] = time.perf_counter() - start
    results["plan"] = {"n_workers": plan.n_workers, "planned_fits": plan.planned_fits,
                       "search_fits": plan.search_fits, "resumed_fits": plan.resumed_fits,
                       "cpu_s": plan.cpu_s, "wall_s": plan.wall_s,
                       "utilisation": plan.utilisation, "factor": plan.factor}
    results["versions"] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "sklearn": sklearn.__version__, "skorch": skorch.__version__,
        "numpy": np.__version__,
    }
    return results
