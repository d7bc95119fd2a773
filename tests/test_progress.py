"""The progress display advances as each fit finishes, in every joblib backend.

joblib calls ``Parallel.print_progress`` in this process after every finished
task; ``count_finished_tasks`` hooks it. The fits here last long enough
(about half a second) for joblib to dispatch them one at a time.
"""

import sys
import threading

import pytest
from sklearn.model_selection import GridSearchCV

from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
from sparse_token_estimators.reproduce import Progress, count_finished_tasks

N_WIDTHS, N_FOLDS = 3, 2


@pytest.fixture(scope="module")
def data():
    return make_sparse_selection(2000, seq_len=10, token_dim=4, n_selected=2, random_state=0)


def search(n_jobs):
    return GridSearchCV(SparseTokenFCN(max_epochs=12, batch_size=64, random_state=0),
                        {"hidden_width": [8, 16, 32][:N_WIDTHS]}, cv=N_FOLDS, refit=False,
                        n_jobs=n_jobs)


def counted(fit):
    counts, threads = [], set()

    def on_finished(n):
        counts.append(n)
        threads.add(threading.current_thread().name)

    with count_finished_tasks(on_finished):
        fit()
    return counts, threads


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_counts_each_fit_as_it_finishes(data, n_jobs):
    counts, _ = counted(lambda: search(n_jobs).fit(*data))
    assert counts == [1] * (N_WIDTHS * N_FOLDS)


# Worker threads start in a second; worker processes import torch first (slow).
@pytest.mark.parametrize("processes", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_counts_fits_on_dask(data, processes):
    distributed = pytest.importorskip("distributed")
    from sparse_token_estimators.distributed import dask_backend

    where = {"host": "127.0.0.1"} if processes else {}  # in-process: no network
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                  dashboard_address=None, **where) as cluster:
        with dask_backend(cluster.scheduler_address):
            counts, threads = counted(lambda: search(None).fit(*data))
    assert sum(counts) == N_WIDTHS * N_FOLDS and set(counts) == {1}
    assert threads != {"MainThread"}  # Dask reports from its client's event loop


def test_hook_is_removed_after_the_block(data):
    import joblib

    original = joblib.Parallel.print_progress
    with count_finished_tasks(lambda n: None):
        assert joblib.Parallel.print_progress is not original
    assert joblib.Parallel.print_progress is original
    counts = []
    with pytest.raises(ValueError):
        with count_finished_tasks(counts.append):
            raise ValueError("a failed run")
    assert joblib.Parallel.print_progress is original


def test_progress_estimates_time_left_by_cost():
    progress = Progress(total=4, enabled=False)
    progress.plan(10.0)
    assert progress.remaining() is None  # nothing done yet
    progress.stage("cheap", n_fits=2, cost=2.0)
    progress.advance(2)
    progress.elapsed = lambda: 6.0
    # 2 of 10 cost units took 6 s: the 8 left take about 4x as long
    assert progress.remaining() == pytest.approx(24.0)
    assert progress.done == 2


def test_progress_without_tqdm_prints_a_line_per_fit(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    progress = Progress(total=3)
    progress.plan(3.0)
    progress.stage("width separation", n_fits=3, cost=3.0)
    progress.advance()
    progress.advance(2)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[  0/3] width separation: 3 fits")
    assert lines[1].startswith("[  1/3] width separation: 0:0") and "left" in lines[1]
    assert lines[2].startswith("[  3/3]") and "~0:00 left" in lines[2]


def test_run_advances_once_per_fit():
    from sparse_token_estimators.reproduce import SMOKE, run
    from sparse_token_estimators.reproduce._run import planned_fits

    steps = []

    class Recording(Progress):
        def advance(self, n=1):
            steps.append(n)
            super().advance(n)

    planned = len(planned_fits(SMOKE)) * SMOKE.n_seeds
    progress = Recording(planned, enabled=False)
    results = run(SMOKE, progress=progress)
    # the planned fits and the searches' (added as they go), each counted once
    assert sum(steps) == progress.total == len(results["fits"])
    assert progress.total > planned


def test_progress_says_it_is_alive_during_a_long_fit(monkeypatch, capsys):
    import time

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    progress = Progress(total=2, refresh=0.01)
    progress.stage("length generalisation", n_fits=2, cost=2.0)
    progress._last_line -= 61  # a minute without a finished fit
    time.sleep(0.2)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert any("length generalisation: still fitting" in line for line in lines)
