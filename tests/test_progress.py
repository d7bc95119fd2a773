"""The progress display advances as each fit finishes, in every joblib backend.

The runner (``_fits.run_fits``) advances it in this process as each record
arrives, after saving that record; the display's clock is injected, so the
times it shows are known exactly.
"""

import sys

import pytest

from sparse_token_estimators.reproduce import SMOKE, Progress, run, with_sizes
from sparse_token_estimators.reproduce._fits import Fit, run_fits
from sparse_token_estimators.reproduce._records import RecordStore
from sparse_token_estimators.reproduce._run import planned_fits

FITS = [Fit("fcn", w, SMOKE.seq_len) for w in (4, 8)] + [Fit("fcn", 4, 4, "population")]


class Counting(Progress):
    """Counts each ``advance`` call and the records in the store at that moment."""

    def __init__(self, store=None):
        super().__init__(0, enabled=False)
        self.store, self.steps, self.stored = store, [], []

    def advance(self, n=1, cost=None):
        self.steps.append(n)
        self.stored.append(None if self.store is None else len(self.store))
        super().advance(n, cost)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_counts_each_fit_as_it_finishes_after_saving_it(n_jobs, tmp_path):
    config = with_sizes(SMOKE, n_jobs=n_jobs)
    store = RecordStore(tmp_path, config)
    progress = Counting(store)
    records = run_fits(config, FITS, progress, store)
    n = len(FITS) * config.n_seeds
    assert len(records) == n and progress.steps == [1] * n
    assert progress.stored == list(range(1, n + 1))  # each saved before it is counted


# Worker threads start in a second; worker processes import torch first (slow).
@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_counts_fits_on_dask(processes):
    distributed = pytest.importorskip("distributed")
    from sparse_token_estimators.distributed import dask_backend

    where = {"host": "127.0.0.1"} if processes else {}  # in-process: no network
    config = with_sizes(SMOKE, n_jobs=-1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                  dashboard_address=None, **where) as cluster:
        with dask_backend(cluster.scheduler_address):
            progress = Counting()
            records = run_fits(config, FITS, progress)
    assert progress.steps == [1] * len(records) == [1] * len(FITS) * config.n_seeds
    alone = run_fits(SMOKE, FITS, Progress(0, enabled=False))
    assert {k: r["test_r2"] for k, r in records.items()} == \
        {k: r["test_r2"] for k, r in alone.items()}  # the same numbers as here


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_estimates_time_left_by_cost():
    clock = Clock()
    progress = Progress(total=4, enabled=False, clock=clock)
    progress.plan(10.0)
    assert progress.remaining() is None  # nothing done yet
    progress.stage("cheap", n_fits=2, cost=2.0)
    progress.advance(2)
    clock.now += 6.0
    # 2 of 10 cost units took 6 s: the 8 left take about 4x as long
    assert progress.remaining() == pytest.approx(24.0)
    progress.advance(cost=4.0)  # a fit's own cost, when the runner knows it
    assert progress.remaining() == pytest.approx(6.0 * 4 / 6)
    assert progress.done == 3


def test_progress_without_tqdm_prints_a_line_per_fit(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    clock = Clock()
    progress = Progress(total=3, clock=clock)
    progress.plan(3.0)
    progress.stage("width separation", n_fits=3, cost=3.0)
    clock.now += 5
    progress.advance()
    clock.now += 10
    progress.advance(2)
    progress.resume(2, 1.0, "search round 1")
    progress.close()
    assert capsys.readouterr().err.splitlines() == [
        "[  0/3] width separation: 3 fits: 0:00 elapsed, time left: after the first fit",
        "[  1/3] width separation: 0:05 elapsed, ~0:10 left",
        "[  3/3] width separation: 0:15 elapsed, ~0:00 left",
        "[  5/3] search round 1: 2 fits resumed from records: 0:15 elapsed, ~0:00 left",
    ]


def test_progress_draws_a_bar_with_tqdm(capsys):
    pytest.importorskip("tqdm")
    clock = Clock()
    progress = Progress(total=2, clock=clock)
    progress.plan(2.0)
    progress.stage("planned fits", n_fits=2, cost=2.0)
    clock.now += 61
    progress.advance()
    progress.add(1)
    progress.close()
    err = capsys.readouterr().err
    assert "1/3 fits" in err and "planned fits: 1:01 elapsed, ~1:01 left" in err


def test_run_advances_once_per_fit():
    # each planned fit once per seed of its own (the architectures': architecture_n_seeds)
    planned = sum(len(fit.seeds(SMOKE)) for fit in planned_fits(SMOKE))
    assert planned < len(planned_fits(SMOKE)) * SMOKE.n_seeds
    progress = Counting()
    progress.total = planned
    results = run(SMOKE, progress=progress)
    # the planned fits and the searches' (added as they go), each counted once
    assert progress.steps == [1] * len(results["fits"]) and progress.total == len(
        results["fits"]) > planned
