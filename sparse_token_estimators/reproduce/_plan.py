"""The time a run will take, said before it is spent: its plan, by the cost model.

:func:`estimate` drives the run's own scheduler (``_dispatch.dispatch``) on a
virtual clock (``SimulatedExecutor``): every planned fit, and every search
driven by made-up scores (:func:`synthetic_r2`: a width reaches the target
from a crossing the theory and the earlier runs suggest), each job lasting its
fits' ``Fit.cost`` times this machine's speed (:func:`machine_factor`). It
gives the fits (planned, and the searches' expected), the CPU seconds, and the
wall seconds on the workers. The searches' true paths depend on the scores the
fits reach: the count of their fits is an expectation (the fourth set's
repeated searches of a non-monotone T are not in it).
"""

import math
import time
from dataclasses import dataclass, field

from ._dispatch import SimulatedExecutor, dispatch
from ._models import MODELS
from ._progress import Progress

#: seconds of a run outside its fits (imports, checks, scoring the results, figures)
OVERHEAD_S = 20.0
#: CPU seconds of :func:`machine_factor`'s workload, one thread, on the machine whose
#: fits the cost model matches: measured there idle before a run, as a run measures it
#: (0.087-0.089 s, 2026-12-05), while its fits run on busy workers (the quick run of
#: 2026-12-05: the model's 1,044 CPU s of training for 1,055 s measured, 608 for 656 in
#: the paper's model; was 0.1, measured on busy cores, which put every plan 12-14% low)
REFERENCE_WORKLOAD_S = 0.088


def _crossing(config, fit):
    """The width from which :func:`synthetic_r2` reaches the target (inf: never)."""
    spec, T, q, d = MODELS[fit.model], fit.seq_len, config.n_selected, config.token_dim
    if spec.family == "transformer":  # about pe_dim_best(T, q) (theory), fast
        return max(2.0, q / 3 * (16 * math.log2(T) - 31))
    if spec.family == "fcn":
        return math.inf if spec.layout == "query" else 1.5 * T * d
    if spec.layout == "query":  # the rivals fail; the encoders with an encoding at ~10
        params = dict(spec.params)
        return 10.0 if spec.family == "encoder" and \
            params.get("positional_encoding") != "none" else math.inf
    return 8.0


def synthetic_r2(config, fit):
    """A made-up validation R^2 of ``fit``: 0.9 from its model's expected crossing width
    on, 0.5 below (the same at every rate and with twice the steps).

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import QUICK
    >>> from sparse_token_estimators.reproduce._models import Fit
    >>> synthetic_r2(QUICK, Fit("query_gru", 64, 8)), synthetic_r2(QUICK, Fit("fcn", 512, 8))
    (0.5, 0.9)
    """
    return 0.9 if fit.width >= _crossing(config, fit) else 0.5


def synthetic_job(config, members):
    """The records of ``members`` by :func:`synthetic_r2` (nothing is fitted)."""
    return [(fit, seed, {"val_r2": synthetic_r2(config, fit), "test_r2": math.nan,
                         "val_loss": math.nan})
            for fit, seed, _ in members]


def machine_factor(repeat=3):
    """This machine's CPU time for a fixed torch workload over the reference machine's
    (``REFERENCE_WORKLOAD_S``), the best of ``repeat``; the cost model's seconds times
    this are this machine's (one thread)."""
    import torch

    best = math.inf
    with torch.random.fork_rng():
        torch.manual_seed(0)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            layer = torch.nn.Linear(128, 128)
            x = torch.randn(256, 128)
            for _ in range(repeat):
                start = time.process_time()
                for _ in range(200):
                    layer.zero_grad()
                    layer(x).square().mean().backward()
                best = min(best, time.process_time() - start)
        finally:
            torch.set_num_threads(threads)
    return best / REFERENCE_WORKLOAD_S


class _Reader:
    """A record store's records, read only (the plan's made-up records are never saved);
    ``read`` counts those found, the store's own count left as it was."""

    def __init__(self, store):
        self.store, self.read = store, 0

    def get(self, config, fit, seed):
        before = self.store.resumed
        record = self.store.get(config, fit, seed)
        self.store.resumed = before
        self.read += record is not None
        return record

    def put(self, config, fit, seed, record):
        pass


@dataclass
class Plan:
    """What a run will fit and how long it will take, by the cost model.

    Attributes
    ----------
    n_workers : int
        The workers the wall time is for.
    planned_fits, search_fits, resumed_fits : int
        (fit, seed) pairs the experiments plan, the searches' expected ones, those already
        recorded (not fitted again).
    cpu_s, wall_s : float
        CPU seconds of the fits to make (one thread each), and wall seconds of the run
        on ``n_workers`` workers (with ``OVERHEAD_S``).
    utilisation : float
        Busy worker-seconds over workers x the fits' wall time.
    by_experiment : dict
        ``{experiment: CPU seconds of the fits it uses}`` (a shared fit counts in each).
    factor : float
        The machine's speed against the cost model's (:func:`machine_factor`).
    """

    n_workers: int
    planned_fits: int = 0
    search_fits: int = 0
    resumed_fits: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    utilisation: float = 1.0
    by_experiment: dict = field(default_factory=dict)
    factor: float = 1.0

    @property
    def n_fits(self):
        return self.planned_fits + self.search_fits

    def lines(self):
        """The plan in words, as the command line prints it before the first fit."""
        searched = f" + about {self.search_fits} the searches will ask for" \
            if self.search_fits else ""
        resumed = f"; {self.resumed_fits} already recorded" if self.resumed_fits else ""
        heavy = sorted(self.by_experiment.items(), key=lambda kv: -kv[1])[:3]
        return [f"plan: {self.planned_fits} fits planned{searched}{resumed}",
                f"  about {clock_text(self.cpu_s)} of CPU time (one thread a fit), "
                f"{clock_text(self.wall_s)} wall on {self.n_workers} worker"
                f"{'s' if self.n_workers != 1 else ''} (utilisation "
                f"{self.utilisation:.2f}; cost model x {self.factor:.2f} for this machine)",
                "  the costliest: " + ", ".join(f"{name} {clock_text(s)}" for name, s in heavy)]


def clock_text(seconds):
    """``12 s``, ``4.2 min`` or ``3.1 h``.

    Examples
    --------
    >>> clock_text(42), clock_text(252), clock_text(11160)
    ('42 s', '4.2 min', '3.1 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate(config, n_workers, *, experiments=None, store=None, factor=1.0):
    """The :class:`Plan` of ``config`` on ``n_workers`` workers.

    ``experiments``: those the run runs (default: ``config``'s); ``store``: a
    ``RecordStore`` whose records count as done (and whose scores steer the searches
    where they have them); ``factor``: the machine's speed (:func:`machine_factor`).

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE
    >>> plan = estimate(SMOKE, 2)
    >>> plan.planned_fits > 0 and plan.search_fits > 0 and plan.wall_s < plan.cpu_s + 60
    True
    """
    from ._fits import _pools
    from ._registry import planned_fits, selected

    experiments = selected(config) if experiments is None else experiments
    used_by = planned_fits(config, experiments)
    planned = {(f, s) for f in used_by for s in f.seeds(config)}

    def seconds(config, members):
        return factor * sum(fit.cost(config) for fit, _, _ in members)

    pool = SimulatedExecutor(n_workers, seconds)
    records, reader = {}, None if store is None else _Reader(store)
    dispatch(config, list(used_by), experiments, records, used_by,
             Progress(0, enabled=False), executor=pool, n_workers=n_workers,
             store=reader, pools=_pools(used_by), job=synthetic_job)
    resumed = reader.read if reader is not None else 0
    fitted = [(f, s) for (f, s), r in records.items() if "fit_s" not in r]
    by_experiment = {}
    for f, _ in fitted:
        for name in used_by[f]:
            by_experiment[name] = by_experiment.get(name, 0.0) + factor * f.cost(config)
    busy = pool.busy
    return Plan(n_workers=n_workers, planned_fits=len(planned),
                search_fits=len(records) - len(planned & set(records)),
                resumed_fits=resumed, cpu_s=busy,
                wall_s=pool.now + OVERHEAD_S,
                utilisation=busy / (n_workers * pool.now) if pool.now else 1.0,
                by_experiment=by_experiment, factor=factor)
