"""``run``: fit what every experiment needs, once, and assess the claims."""

import functools
import platform
import time
from dataclasses import asdict

import numpy as np
import sklearn
import skorch
import torch

from ..theory import (
    fcn_lower_bound,
    fcn_width_threshold,
    transformer_pe_scale,
    uniform_attention_loss,
    zero_predictor_loss,
)
from ._config import QUICK
from ._fits import run_fits
from ._models import MODELS, describe_models
from ._progress import Progress
from ._records import RecordStore
from ._registry import EXPERIMENTS
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


def selected(config):
    """The experiments ``config`` runs (``config.experiments``; None: all), in order."""
    if config.experiments is None:
        return EXPERIMENTS
    known = [e.name for e in EXPERIMENTS]
    unknown = sorted(set(config.experiments) - set(known))
    if unknown:
        raise ValueError(f"experiments={tuple(config.experiments)!r} names {unknown}, which "
                         f"the reproduction does not have; choose among {known}.")
    return tuple(e for e in EXPERIMENTS if e.name in config.experiments)


def planned_fits(config):
    """``{fit: [experiments that use it]}``: what ``run`` fits before the searches."""
    used_by = {}
    for experiment in selected(config):
        for fit in experiment.fits(config):
            names = used_by.setdefault(fit, [])
            if experiment.name not in names:
                names.append(experiment.name)
    return used_by


def run_searches(config, experiments, records, used_by, progress, fit=run_fits):
    """``{experiment name: what its search returned}``, the searches run side by side.

    Every round, the fits every live search (``Experiment.search``) asks for
    are made in one call of ``fit(config, fits, progress)``, each once, and
    each search gets its records back; which searches share a round changes
    the schedule, not a number. ``records`` and ``used_by`` are updated in
    place.
    """
    live, found = {}, {}

    def ask(i, answer):
        gen = live[i][0]
        try:
            live[i] = (gen, list(gen.send(answer)))
        except StopIteration as stop:
            found[experiments[i].name] = stop.value
            del live[i]

    for i, experiment in enumerate(experiments):
        gen = experiment.search(config)
        if gen is not None:
            live[i] = (gen, None)
            ask(i, None)
    rounds = 0
    while live:
        rounds += 1
        new = []
        for i, (_, fits) in sorted(live.items()):
            for f in fits:
                names = used_by.get(f)
                if names is None:
                    names = used_by[f] = []
                    new.append(f)
                if experiments[i].name not in names:
                    names.append(experiments[i].name)
        if new:
            # a search's fits are not known in advance: the total grows as it goes
            progress.add(sum(len(f.seeds(config)) for f in new))
            progress.plan(sum(f.cost(config) * len(f.seeds(config)) for f in new))
            searching = ", ".join(experiments[i].name for i in sorted(live))
            records.update(fit(config, new, progress,
                               label=f"search round {rounds} ({searching})"))
        for i, (_, fits) in sorted(live.items()):
            ask(i, {(f, s): records[f, s] for f in fits for s in f.seeds(config)})
    return found


def run(config=QUICK, *, progress=True, store=None):
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

    Returns
    -------
    results : dict
        ``config``, ``theory``, ``models``, one section per experiment,
        ``fits`` (a row per fit and seed), ``thresholds``, ``claims``,
        ``elapsed_s``, ``versions``.

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
    if not isinstance(progress, Progress):
        progress = Progress(sum(len(fit.seeds(config)) for fit in used_by),
                            enabled=bool(progress))
    progress.plan(sum(fit.cost(config) * len(fit.seeds(config)) for fit in used_by))
    start = time.perf_counter()
    fit = functools.partial(run_fits, store=store)
    try:
        records = fit(config, used_by, progress, label="planned fits")
        found = run_searches(config, selected(config), records, used_by, progress, fit)
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
    results["versions"] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "sklearn": sklearn.__version__, "skorch": skorch.__version__,
        "numpy": np.__version__,
    }
    return results
