"""The run's scheduler: the planned fits and every search's rounds, with no round barrier.

:func:`dispatch` keeps the workers of an executor busy with the fits the run
needs: the experiments' planned fits, and each search's requests
(``Experiment.search``: a generator yielding fits, receiving their records).
A search's next request is asked for as soon as its own fits return, whatever
the other searches are doing; a :class:`~._bracket.Round` (searches side by
side, :func:`~._bracket.lockstep`) is answered branch by branch
(:class:`~._bracket.Answers`), so that within one experiment, too, each model's
search goes on alone. Whenever a worker is free it gets the costliest job
(``Fit.cost``) of those waiting (those of the searches other searches wait on,
``Experiment.gating``, first): a group of fits trained side by side
(``_fits.group_job``: one model and width, any rates and seeds), or, where
there are fewer groups waiting than free workers, single ``(fit, seed)`` jobs; on
more than 2 workers a fit a search waits on goes alone where the trainer is
"exact" (a group's fits train one after another there: grouped, the search's
round would last their sum).
A record is the same whichever job made it and whenever: only the order changes.

The executor is any ``concurrent.futures.Executor`` (a process pool, a Dask
client's ``get_executor()``), :class:`SerialExecutor` (in this process), or
:class:`SimulatedExecutor` (a virtual clock: the plan and the benchmark).
"""

import concurrent.futures as cf
import heapq
import itertools
import os
import socket
import time

from . import _fits
from ._bracket import WAIT, Answers, Round
from ._fits import group_key

#: the variables that set a worker's threads (as joblib sets them for its workers)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


class SerialExecutor(cf.Executor):
    """Runs each job in this process as it is submitted (one worker; an error is raised
    at once, from ``submit``)."""

    def submit(self, fn, /, *args, **kwargs):
        future = cf.Future()
        future.set_result(fn(*args, **kwargs))
        return future


class SimulatedExecutor(cf.Executor):
    """``n_workers`` workers on a virtual clock: a job's result is computed at once, and
    the job is done ``duration(*args)`` virtual seconds after it starts (when a worker
    is free). ``busy`` sums the durations, ``now`` is the clock.

    Examples
    --------
    >>> pool = SimulatedExecutor(2, duration=lambda x: x)
    >>> futures = [pool.submit(lambda x: x, 3), pool.submit(lambda x: x, 1)]
    >>> [f.result() for f in pool.wait_first(futures)], pool.now
    ([1], 1.0)
    """

    def __init__(self, n_workers, duration):
        self.n_workers, self.duration = n_workers, duration
        self.now, self.busy = 0.0, 0.0
        self._ends = []  # (end, order, future)
        self._order = itertools.count()

    def submit(self, fn, /, *args, **kwargs):
        if len(self._ends) >= self.n_workers:
            raise RuntimeError("every simulated worker is busy: wait for one first")
        future = cf.Future()
        future.set_result(fn(*args, **kwargs))
        seconds = float(self.duration(*args))
        self.busy += seconds
        heapq.heappush(self._ends, (self.now + seconds, next(self._order), future))
        return future

    def wait_first(self, futures):
        """The futures done first (advancing the clock to their end)."""
        end, _, first = heapq.heappop(self._ends)
        self.now, done = end, {first}
        while self._ends and self._ends[0][0] <= end:
            done.add(heapq.heappop(self._ends)[2])
        return done


def wait_first(executor, futures):
    """The futures of ``futures`` done first (at least one)."""
    own = getattr(executor, "wait_first", None)
    if own is not None:
        return own(futures)
    return cf.wait(futures, return_when=cf.FIRST_COMPLETED).done


def process_executor(n_workers):
    """The reusable pool of ``n_workers`` worker processes of joblib's default backend
    (loky), each worker's threads limited as joblib's ``Parallel`` limits them (the
    variables already set here, else the cores over the workers): the pool a joblib
    call with ``n_jobs=n_workers`` uses, shared with it."""
    from joblib import cpu_count
    from joblib.executor import get_memmapping_executor

    threads = str(max(cpu_count() // n_workers, 1))
    env = {name: os.environ.get(name, threads) for name in THREAD_VARIABLES}
    if "ENABLE_IPC" not in os.environ:  # TBB's schedulers coordinate across processes
        env["ENABLE_IPC"] = "1"
    return get_memmapping_executor(n_workers, timeout=300, env=env)


def timed_job(config, members, job=None):
    """``job(config, members)`` (default: ``_fits.group_job``) with its wall-clock start and
    end (epoch seconds) and its worker (host:pid) written into each record: the run's
    utilisation is read from them."""
    start = time.time()
    done = (job or _fits.group_job)(config, members)
    end, worker = time.time(), f"{socket.gethostname()}:{os.getpid()}"
    for _, _, record in done:
        record.update(started_at=start, ended_at=end, worker=worker)
    return done


def _leaves(request, path=()):
    """``{path: list of fits}`` of a request (a :class:`Round` branch by branch)."""
    if isinstance(request, Round):
        out = {}
        for name, branch in request.branches.items():
            out.update(_leaves(branch, (*path, name)))
        return out
    return {path: list(request)}


def _answer(paths, records_of):
    """What a search is sent once the leaves ``paths`` are complete: the records of the one
    leaf of a plain request, else nested :class:`Answers`."""
    if paths == [()]:
        return records_of(())
    answer = Answers()
    for path in paths:
        node = answer
        for name in path[:-1]:
            node = node.setdefault(name, Answers())
        node[path[-1]] = records_of(path)
    return answer


def split_jobs(config, waiting, free, single=None, first=()):
    """Up to ``free`` jobs from ``waiting`` (``{(fit, seed): pool}``): one per group
    (``group_key``), or single ``(fit, seed)`` jobs where there are fewer groups than
    ``free`` (a worker would idle beside a whole group); ``single((fit, seed))``: whether
    that one goes alone whatever the groups. The jobs of the models of ``first`` go first,
    then the costliest. Each job is a list of ``(fit, seed, pool)``.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE
    >>> from sparse_token_estimators.reproduce._models import Fit
    >>> waiting = {(Fit("fcn", 8, 4, lr=lr), 0): 0 for lr in (0.01, 0.03)}
    >>> [len(job) for job in split_jobs(SMOKE, waiting, 1)]
    [2]
    >>> [len(job) for job in split_jobs(SMOKE, waiting, 2)]
    [1, 1]
    >>> [len(job) for job in split_jobs(SMOKE, waiting, 1, single=lambda item: True)]
    [1]
    """
    groups, jobs = {}, []
    for (fit, seed), pool in waiting.items():
        if single is not None and single((fit, seed)):
            jobs.append([(fit, seed, pool)])
        else:
            groups.setdefault(group_key(fit), []).append((fit, seed, pool))
    jobs += list(groups.values())
    if len(jobs) < free:
        jobs = [[member] for job in jobs for member in job]
    jobs.sort(key=lambda job: (not any(fit.model in first for fit, _, _ in job),
                               -sum(fit.cost(config) for fit, _, _ in job)))
    return jobs[:free]


class _Search:
    """One live search: its generator and the leaves of its request still waiting."""

    def __init__(self, index, generator):
        self.index, self.generator = index, generator
        self.leaves = {}     # path -> fits of the leaf in flight
        self.missing = {}    # path -> {(fit, seed)} not yet recorded
        self.ready = []      # complete paths not yet answered


def dispatch(config, planned, experiments, records, used_by, progress, *, executor,
             n_workers, store=None, pools=None, job=timed_job, on_record=None):
    """Fit ``planned`` and run every experiment's search; returns ``{experiment name: what
    its search returned}``, in the order of ``experiments``.

    Parameters
    ----------
    config : ReproductionConfig
    planned : iterable of Fit
        The fits the experiments plan (each for each of its seeds).
    experiments : sequence of Experiment
        Their searches (``search(config)``) start at once, side by side.
    records, used_by : dict
        ``{(fit, seed): record}`` and ``{fit: [experiment names]}``, updated in place (a
        search's fits are added to ``used_by`` under its name as it asks for them).
    progress : Progress
    executor : concurrent.futures.Executor
        Where the jobs run.
    n_workers : int
        How many jobs it runs at once.
    store : RecordStore or None
        Records read back before fitting, and each new one saved as it returns.
    pools : dict or None
        ``{fit: pool size}`` of the learning curves' fits (``_fits._pools``).
    job : callable, default=timed_job
        ``job(config, members) -> [(fit, seed, record)]``, run in the workers.
    on_record : callable or None
        Called with ``(fit, seed, record)`` for every record fitted, before it is stored
        (it may add to the record).
    """
    run = _Dispatch(config, experiments, records, used_by, progress, n_workers=n_workers,
                    store=store, pools=pools, on_record=on_record)
    run.start(planned)
    return run.loop(executor, job)


class _Dispatch:
    """``dispatch``'s state: the fits waiting, running and in flight, and the live searches.

    ``start`` counts the planned fits and starts every search; ``loop`` answers the
    searches whose fits are all recorded, submits the waiting fits to the free workers
    and collects the jobs as they finish, until no search is left.
    """

    def __init__(self, config, experiments, records, used_by, progress, *, n_workers,
                 store, pools, on_record):
        self.config, self.experiments, self.progress = config, experiments, progress
        self.records, self.used_by, self.store = records, used_by, store
        self.n_workers, self.on_record = n_workers, on_record
        self.pools = pools or {}
        self.waiting, self.running, self.in_flight = {}, {}, set()
        self.watchers = {}  # (fit, seed) -> [(search, path)]
        self.searches, self.found = {}, {}
        self.resumed = []  # read back from the store, not yet counted on progress
        # the models whose searches others wait on go first; on more than 2 workers a fit
        # a search waits on goes alone where the fits of a group train one after another
        # anyway (trainer "exact"): its round returns with its last fit, not after their
        # sum (on 2 workers the throughput, not a round's wait, sets the time:
        # benchmarks/bench_dispatch)
        self.first = {m for e in experiments if hasattr(e, "gating") for m in e.gating(config)}

    def single(self, item):
        return self.config.trainer == "exact" and item in self.watchers and self.n_workers > 2

    def need(self, fit, seed):
        """Whether (fit, seed) must be fitted (read back from the store if it is there)."""
        if (fit, seed) in self.records:
            return False
        record = None if self.store is None else self.store.get(self.config, fit, seed)
        if record is not None:
            self.records[fit, seed] = record
            self.resumed.append(fit)
            return False
        if (fit, seed) not in self.in_flight:
            self.in_flight.add((fit, seed))
            self.waiting[fit, seed] = self.pools.get(fit, 0)
        return True

    def register(self, search, request):
        """Note the fits of ``search``'s ``request``; a leaf whose fits are recorded is ready."""
        config, progress = self.config, self.progress
        name = self.experiments[search.index].name
        if request is WAIT:  # a lockstep's searches all wait on one another
            raise RuntimeError(f"the searches of {name} wait on each other: none asks for "
                               "a fit")
        for path, fits in _leaves(request).items():
            if path in search.leaves:
                continue  # still in flight from an earlier request
            new = [f for f in fits if f not in self.used_by]
            if new:
                progress.add(sum(len(f.seeds(config)) for f in new))
                progress.plan(sum(f.cost(config) * len(f.seeds(config)) for f in new))
            for f in fits:
                names = self.used_by.setdefault(f, [])
                if name not in names:
                    names.append(name)
            missing = {(f, s) for f in fits for s in f.seeds(config) if self.need(f, s)}
            search.leaves[path], search.missing[path] = fits, missing
            for item in missing:
                self.watchers.setdefault(item, []).append((search, path))
            if not missing:
                search.ready.append(path)
        self.count_resumed(f"search ({name})")

    def count_resumed(self, label):
        if self.resumed:
            self.progress.resume(len(self.resumed),
                                 sum(f.cost(self.config) for f in self.resumed), label)
            self.resumed.clear()

    def answer(self, search):
        """Send ``search`` the records of its ready leaves; register what it asks next."""
        paths, search.ready = search.ready, []

        def records_of(path):
            fits = search.leaves.pop(path)
            del search.missing[path]
            return {(f, s): self.records[f, s] for f in fits for s in f.seeds(self.config)}

        reply = _answer(paths, records_of)
        try:
            request = search.generator.send(reply)
        except StopIteration as stop:
            self.found[self.experiments[search.index].name] = stop.value
            del self.searches[search.index]
            return
        self.register(search, request)

    def start(self, planned):
        """Count the planned fits (those in the store read back) and start every search."""
        for fit in sorted(set(planned)):
            for seed in fit.seeds(self.config):
                self.need(fit, seed)
        self.count_resumed("planned fits")
        for i, experiment in enumerate(self.experiments):
            generator = experiment.search(self.config)
            if generator is None:
                continue
            search = self.searches[i] = _Search(i, generator)
            try:
                self.register(search, next(generator))
            except StopIteration as stop:
                self.found[experiment.name] = stop.value
                del self.searches[i]

    def submit(self, executor, job):
        """Give the free workers jobs of the waiting fits."""
        free = self.n_workers - len(self.running)
        while free > 0 and self.waiting:
            for members in split_jobs(self.config, self.waiting, free, self.single,
                                      self.first):
                for fit, seed, _ in members:
                    del self.waiting[fit, seed]
                self.running[executor.submit(job, self.config, members)] = members
            free = self.n_workers - len(self.running)

    def collect(self, future):
        """Record (and store) the records of a finished job; ready the leaves they complete."""
        del self.running[future]
        for fit, seed, record in future.result():
            self.records[fit, seed] = record
            self.in_flight.discard((fit, seed))
            if self.on_record is not None:
                self.on_record(fit, seed, record)
            if self.store is not None:
                self.store.put(self.config, fit, seed, record)
            self.progress.advance(cost=fit.cost(self.config))
            for search, path in self.watchers.pop((fit, seed), []):
                search.missing[path].discard((fit, seed))
                if not search.missing[path] and search.index in self.searches:
                    search.ready.append(path)

    def loop(self, executor, job):
        """Run until no search is left; returns ``{experiment name: its search's result}``."""
        try:
            while True:
                for search in [s for s in list(self.searches.values()) if s.ready]:
                    self.answer(search)
                if any(s.ready for s in self.searches.values()):
                    continue
                self.submit(executor, job)
                if not self.running:
                    if self.searches:  # cannot happen: every live search waits on a fit
                        raise RuntimeError("the searches wait on no fit")
                    return {e.name: self.found[e.name] for e in self.experiments
                            if e.name in self.found}
                for future in wait_first(executor, list(self.running)):
                    self.collect(future)
        finally:
            for future in self.running:
                future.cancel()
