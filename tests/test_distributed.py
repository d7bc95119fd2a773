"""Searches on a real Dask cluster: two worker processes on loopback.

One cluster serves the module (starting worker processes that import torch
costs seconds); every search runs under a time limit, and the test that kills
a worker waits for the nanny's replacement, so the cluster leaves as it came.
"""

import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_estimator
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.distributed import dask_backend

distributed = pytest.importorskip("distributed")

SEARCH_TIMEOUT = 180  # seconds; a first fit on a fresh worker imports torch


@pytest.fixture(scope="module")
def cluster():
    environ = dict(os.environ)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=":0") as cluster:
        yield cluster
    # the nanny sets its workers' variables (OMP_NUM_THREADS=1, ...) here too
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture(scope="module")
def client(cluster):
    with distributed.Client(cluster) as client:
        yield client


@pytest.fixture
def one_torch_thread():
    # Dask's nanny gives each worker process one torch thread; local fits
    # compared with the workers' use the same, so the arithmetic matches.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data():
    # 400 samples: the 2-fold index arrays are big enough for joblib to scatter
    return make_sparse_selection(400, seq_len=6, token_dim=3, n_selected=2, random_state=0)


def width_search(estimator, **kwargs):
    if isinstance(estimator, SparseTokenTransformer):
        grid = {"pe_dim": [4, 16]}
    else:
        grid = {"hidden_width": [8, 32]}
    return GridSearchCV(estimator, grid, cv=2, refit=False, **kwargs)


def fit_on_cluster(search, X, y, scheduler):
    """Fit ``search`` under ``dask_backend(scheduler)``; fail after SEARCH_TIMEOUT s."""
    outcome = {}

    def fit():
        try:
            with dask_backend(scheduler) as client, \
                    distributed.get_task_stream(client) as tasks:
                search.fit(X, y)
            outcome["tasks"] = tasks.data
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    # joblib's backend setting is per thread: it is entered in the fitting thread
    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    thread.join(SEARCH_TIMEOUT)
    if thread.is_alive():
        pytest.fail(f"the search on the Dask cluster did not finish in {SEARCH_TIMEOUT} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["tasks"]


def assert_same_scores(search, reference):
    n_splits = reference.n_splits_
    assert search.n_splits_ == n_splits
    for key in [f"split{i}_test_score" for i in range(n_splits)]:
        np.testing.assert_allclose(search.cv_results_[key], reference.cv_results_[key],
                                   rtol=1e-6, err_msg=key)
    np.testing.assert_array_equal(search.cv_results_["rank_test_score"],
                                  reference.cv_results_["rank_test_score"])


@pytest.mark.parametrize("estimator", [  # from the catalogue; the search sets the width
    make_estimator("transformer", max_epochs=3, batch_size=32),
    make_estimator("fcn", max_epochs=3, batch_size=32),
], ids=["transformer", "fcn"])
def test_search_on_dask_equals_local_search(estimator, cluster, data, one_torch_thread):
    X, y = data
    local = width_search(clone(estimator)).fit(X, y)
    search = width_search(clone(estimator))
    tasks = fit_on_cluster(search, X, y, cluster.scheduler_address)
    # the fits ran as tasks on the workers, not in this process
    fit_tasks = [t for t in tasks if "_fit_and_score" in t["key"]]
    assert fit_tasks
    assert {t["worker"] for t in fit_tasks} <= set(cluster.scheduler_info["workers"])
    assert_same_scores(search, local)
    # widths differ, so equal scores are not equal by accident
    assert len(set(local.cv_results_["mean_test_score"])) == 2


class RecordTorchThreads(Callback):
    """Note how many threads torch uses while the net trains."""

    def on_train_begin(self, net, **kwargs):
        self.threads_ = torch.get_num_threads()


def test_estimator_fits_on_a_worker_and_comes_back(client, data, one_torch_thread):
    X, y = data
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, random_state=0,
                         callbacks=[RecordTorchThreads()])
    fitted = client.submit(clone(est).fit, X, y, pure=False).result(timeout=SEARCH_TIMEOUT)
    # A worker with nthreads=1 runs one fit at a time; torch must not start a
    # thread per core on top of it (Dask's nanny sets OMP_NUM_THREADS=1).
    assert fitted.callbacks[0].threads_ == 1
    # device="auto" travels as "auto" and is resolved where fit runs
    assert fitted.device == "auto"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert next(fitted.module_.parameters()).device.type == expected
    np.testing.assert_allclose(fitted.predict(X[:5]), clone(est).fit(X, y).predict(X[:5]),
                               rtol=1e-5, atol=1e-6)


class KillWorkerOnce(Callback):
    """SIGKILL the Dask worker process running this fit, at ``epoch``, once.

    Only on a Dask worker (a local fit is left alone), and only for the first
    fit that reaches ``epoch``: the file ``marker`` records the killed pid.
    """

    def __init__(self, marker, epoch=3):
        self.marker = marker
        self.epoch = epoch

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) != self.epoch:
            return
        try:
            distributed.get_worker()
        except ValueError:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)  # no goodbye: as an OOM kill would


def _times_processing(dask_scheduler, keys):
    stories = {key: dask_scheduler.story(key) for key in keys}
    return {key: sum(1 for event in story if event[2] == "processing")
            for key, story in stories.items()}


def load_example():
    """``examples/distributed_search.py`` as a module."""
    path = Path(__file__).parents[1] / "examples" / "distributed_search.py"
    spec = importlib.util.spec_from_file_location("distributed_search", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_example_prints_the_width_table(cluster, capsys):
    example = load_example()
    rows = example.main(["--scheduler", cluster.scheduler_address, "--size", "tiny"])
    out = capsys.readouterr().out
    assert {(r["estimator"], r["value"]) for r in rows} == {
        ("SparseTokenTransformer", 4), ("SparseTokenTransformer", 8),
        ("SparseTokenFCN", 8), ("SparseTokenFCN", 32)}
    assert all(np.isfinite(r["r2_mean"]) for r in rows)
    for r in rows:
        assert f"{r['r2_mean']:.3f}" in out


def test_example_without_dask_says_what_to_install(monkeypatch, capsys):
    example = load_example()
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    with pytest.raises(SystemExit) as info:
        example.main(["--size", "tiny"])
    assert info.value.code == 2
    assert 'pip install -e ".[distributed]"' in capsys.readouterr().err


def test_dask_backend_local_cluster_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with dask_backend(n_workers=1, host="127.0.0.1", dashboard_address=":0") as client:
        (omp,) = client.run(os.getenv, "OMP_NUM_THREADS").values()
        (trim,) = client.run(os.getenv, "MALLOC_TRIM_THRESHOLD_").values()
    # one torch thread per single-threaded worker; glibc's default allocator
    assert (omp, trim) == ("1", None)
    # the nanny's settings do not outlive the block in this process
    assert "OMP_NUM_THREADS" not in os.environ
    assert client.status == "closed"


def test_dask_backend_rejects_cluster_options_with_an_address():
    with pytest.raises(ValueError, match="n_workers"):
        with dask_backend("tcp://127.0.0.1:8786", n_workers=2):
            pass


def test_dask_backend_without_dask_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install -e \"\.\[distributed\]\""):
        with dask_backend():
            pass


def test_search_survives_a_killed_worker(cluster, client, data, one_torch_thread,
                                         tmp_path):
    X, y = data
    marker = tmp_path / "killed"
    estimator = SparseTokenTransformer(max_epochs=10, batch_size=32, random_state=0,
                                       callbacks=[KillWorkerOnce(str(marker))])
    local = width_search(clone(estimator)).fit(X, y)
    pids_before = set(client.run(os.getpid).values())

    # One fit per worker dispatched at a time, as in a long search: the fits
    # still to come need data that joblib scattered, also to the killed worker.
    search = width_search(clone(estimator), pre_dispatch="n_jobs")
    tasks = fit_on_cluster(search, X, y, cluster.scheduler_address)

    killed_pid = int(marker.read_text())
    assert killed_pid in pids_before
    assert_same_scores(search, local)
    # Dask ran the fit that died with its worker a second time
    keys = [t["key"] for t in tasks if "_fit_and_score" in t["key"]]
    assert max(client.run_on_scheduler(_times_processing, keys=keys).values()) >= 2
    # and the nanny replaced the killed process
    client.wait_for_workers(2, timeout=SEARCH_TIMEOUT)
    pids_after = set(client.run(os.getpid).values())
    assert killed_pid not in pids_after and len(pids_after) == 2


def _fit_here(X, y):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=2, random_state=0).fit(X, y)
    return dict(visible=os.getenv("CUDA_VISIBLE_DEVICES"), n_visible=torch.cuda.device_count(),
                device=str(next(est.module_.parameters()).device),
                gpu=str(torch.cuda.get_device_properties(0).uuid))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_worker_per_gpu_fits_on_its_own_gpu(data):
    # The recipe of the README (and what dask_cuda.LocalCUDACluster builds):
    # one single-threaded worker per GPU, CUDA_VISIBLE_DEVICES naming its GPU.
    X, y = data
    all_gpus = ",".join(map(str, range(torch.cuda.device_count())))
    gpus = os.getenv("CUDA_VISIBLE_DEVICES", all_gpus).split(",")
    workers = {f"gpu{gpu}": {"cls": distributed.Nanny, "options": {
        "nthreads": 1, "env": {"CUDA_VISIBLE_DEVICES": gpu}}} for gpu in gpus}
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    environ = dict(os.environ)
    try:
        with distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, \
                distributed.Client(cluster) as client:
            seen = client.gather([client.submit(_fit_here, X, y, workers=[name], pure=False)
                                  for name in workers])
            search = width_search(SparseTokenTransformer(max_epochs=3, random_state=0))
            tasks = fit_on_cluster(search, X, y, cluster.scheduler_address)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert [s["visible"] for s in seen] == gpus
    assert all(s["n_visible"] == 1 and s["device"] == "cuda:0" for s in seen)
    # each worker on a different physical GPU
    assert len({s["gpu"] for s in seen}) == len(gpus)
    assert any("_fit_and_score" in t["key"] for t in tasks)
    local = width_search(SparseTokenTransformer(max_epochs=3, random_state=0)).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               local.cv_results_["mean_test_score"], rtol=1e-4, atol=1e-5)
