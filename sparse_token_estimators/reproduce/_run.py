"""``run``: fit what every experiment needs, once, and assess the claims."""

import platform
import threading
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
from ._fits import MODELS, describe_models, run_fits
from ._progress import Progress, count_finished_tasks
from ._records import RecordStore, recording
from ._registry import EXPERIMENTS
from ._verdicts import FIXED_ON, RESOLUTION, THRESHOLDS, assess_claims


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
    """``{fit: [names of the experiments that use it]}``: what ``run`` fits per seed
    before the searches."""
    used_by = {}
    for experiment in selected(config):
        for fit in experiment.fits(config):
            names = used_by.setdefault(fit, [])
            if experiment.name not in names:
                names.append(experiment.name)
    return used_by


class _Abandoned(Exception):
    """Raised in a search's thread when the run stops (another search failed)."""


def _searches(config, experiments, records, used_by, progress):
    """Run the experiments' searches side by side, their rounds merged.

    Each experiment's ``search(config, fit_round)`` runs in a thread of its
    own; a call of its ``fit_round(fits)`` waits until every search still
    running waits too, then all their fits are fitted as one round (every
    seed, through ``run_fits``, in this thread), so the workers are not left
    idle by rounds of a few fits. A search's path depends only on the scores
    it is given, and each fit is seeded: which searches share a round changes
    the schedule, not a number. Experiments that use a fit are noted in
    experiment order. The first search that fails stops the others; its
    exception is raised here.
    """
    cond = threading.Condition()
    pending, answers, errors = {}, {}, {}
    live = set(range(len(experiments)))

    def fit_round_of(i):
        def fit_round(fits):
            with cond:
                pending[i] = list(fits)
                cond.notify_all()
                cond.wait_for(lambda: i in answers)
                answer = answers.pop(i)
            if isinstance(answer, BaseException):
                raise _Abandoned from answer
            return answer
        return fit_round

    def search(i, experiment):
        try:
            experiment.search(config, fit_round_of(i))
        except _Abandoned:
            pass
        except BaseException as error:  # noqa: BLE001 - raised again in the caller
            errors[i] = error
        finally:
            with cond:
                live.discard(i)
                cond.notify_all()

    threads = [threading.Thread(target=search, args=(i, e), daemon=True,
                                name=f"search:{e.name}") for i, e in enumerate(experiments)]
    for thread in threads:
        thread.start()
    try:
        while True:
            with cond:
                cond.wait_for(lambda: errors or all(i in pending for i in live))
                if errors:  # a search failed: the except clause releases the others
                    raise errors[min(errors)]
                if not live:
                    break
                batch = sorted(pending.items())
                pending.clear()
            new = []
            for i, fits in batch:
                for fit in fits:
                    names = used_by.get(fit)
                    if names is None:
                        names = used_by[fit] = []
                        new.append(fit)
                    if experiments[i].name not in names:
                        names.append(experiments[i].name)
            if new:
                # a search's fits are not known in advance: the total grows as it goes
                progress.add(len(new) * config.n_seeds)
                progress.plan(sum(f.cost(config) for f in new) * config.n_seeds)
                records.update(run_fits(config, new, progress))
            with cond:
                for i, fits in batch:
                    answers[i] = {(f, s): records[f, s] for f in fits for s in config.seeds()}
                cond.notify_all()
    except BaseException as error:
        with cond:  # release every waiting search: nothing more is fitted
            for i in live:
                answers[i] = error
            cond.notify_all()
        raise
    finally:
        for thread in threads:
            thread.join()


def run(config=QUICK, *, progress=True, store=None):
    """Run every experiment over ``config.n_seeds`` seeds and assess the claims.

    Each distinct fit the experiments ask for is made once per seed (inside
    one ``GridSearchCV`` per training set), then the searches (the critical
    widths) fit theirs round by round, then each experiment reads its
    numbers off the fits.

    Parameters
    ----------
    config : ReproductionConfig, default=QUICK
    progress : bool or Progress, default=True
        Show a progress display on stderr, advanced as each fit finishes.
    store : str, path, RecordStore or None, default=None
        An output folder (or its ``_records.RecordStore``): save each
        finished fit in its ``records/``, and read back (not fit again)
        those it holds, so a run killed part way continues where it stopped,
        with the same numbers. A folder whose records were made with another
        configuration is refused (``ValueError`` naming what differs). The
        command line keeps them in ``--out``.

    Returns
    -------
    results : dict
        ``config``, ``theory``, ``models`` (name and training of each),
        one section per experiment, ``fits`` (one row per fit and seed, with
        its CPU time and the experiments that use it), ``thresholds``,
        ``claims``, ``elapsed_s``, ``versions``.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> results = run(SMOKE, progress=False)
    >>> [c["claim"] for c in results["claims"]][:3]
    ['width separation', 'length generalisation', 'alignment']
    >>> [c["claim"] for c in results["claims"]][3:5]
    ['transformer width scaling', 'FCN tightness']
    >>> [c["claim"] for c in results["claims"]][5:]
    ['width separation on the population']
    """
    if store is not None and not isinstance(store, RecordStore):
        store = RecordStore(store, config)
    with recording(store):  # every run_fits of the run saves into ``store``
        return _run(config, progress)


def _run(config, progress):
    used_by = planned_fits(config)
    if not isinstance(progress, Progress):
        progress = Progress(len(used_by) * config.n_seeds, enabled=bool(progress))
    progress.plan(sum(fit.cost(config) for fit in used_by) * config.n_seeds)
    start = time.perf_counter()
    try:
        with count_finished_tasks(progress.advance):
            records = run_fits(config, used_by, progress)
            _searches(config, selected(config), records, used_by, progress)
    finally:
        progress.close()
    results = {
        "config": asdict(config),
        "theory": _theory_references(config),
        "models": describe_models(config, [m for m in MODELS
                                           if any(f.model == m for f in used_by)]),
    }
    for experiment in selected(config):
        results[experiment.name] = experiment.collect(config, records)
    results["fits"] = [
        {**{k: v for k, v in record.items() if k not in ("r2_by_length", "trace")},
         "used_by": used_by[fit]}
        for (fit, seed), record in sorted(records.items())
    ]
    results["thresholds"] = {**THRESHOLDS, "fixed_on": FIXED_ON,
                             "fixed_before_the_run": True, "resolution": dict(RESOLUTION)}
    results["claims"] = assess_claims(results)
    results["elapsed_s"] = time.perf_counter() - start
    results["versions"] = {
        "python": platform.python_version(), "torch": torch.__version__,
        "sklearn": sklearn.__version__, "skorch": skorch.__version__,
        "numpy": np.__version__,
    }
    return results
