"""Wall time of one width search on Dask against joblib's local backends.

The same ``GridSearchCV`` (the transformer over ``pe_dim``) runs, in one
process run, as:

- ``n_jobs=1``: in this process, one torch thread (the baseline);
- ``loky n_jobs=2``: joblib's default process backend;
- ``dask 1 worker`` / ``dask 2 workers``: a ``LocalCluster`` of single-threaded
  worker processes, through ``sparse_token_estimators.distributed.dask_backend``;
- ``dask 2 workers, plain joblib``: the same cluster through joblib's own
  ``parallel_config("dask")``, to show what the recoverable data costs;
- ``dask 2 workers, Dask's malloc``: a cluster with Dask's default
  ``MALLOC_TRIM_THRESHOLD_``, which ``dask_backend``'s local cluster leaves out.

Every fit uses one torch thread. Worker processes are started and warmed up
(their first fit imports most of torch) before the clock starts; their start-up
time is reported apart. The repeats go round all configurations, side by side.
Speed-ups are against ``n_jobs=1`` in the same run. "fit CPU s" sums the CPU
time of the training threads over the fits, and "CPU ratio" compares it with
the baseline's: wall times on a shared machine swing with the load, CPU time
much less, so this column shows what a configuration costs per fit. The
cross-validated scores of every configuration are checked against the
baseline's.
Prints a table and writes JSON to ``benchmarks/results/``::

    python benchmarks/bench_dask.py --quick    # minutes on 2 cores, mostly start-up
    python benchmarks/bench_dask.py            # larger task, 3 repeats
"""

import argparse
import json
import os
import platform
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

import distributed
import joblib
import numpy as np
import sklearn
import torch
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from skorch.callbacks import Callback

from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.distributed import _local_cluster, dask_backend

SIZES = {
    "quick": dict(n_samples=3000, seq_len=16, token_dim=4, n_selected=2, max_epochs=5,
                  pe_dims=[16, 32, 64], cv=2, repeats=2),
    "full": dict(n_samples=10000, seq_len=20, token_dim=8, n_selected=3, max_epochs=5,
                 pe_dims=[16, 32, 64, 128], cv=3, repeats=3),
}
RESULTS = Path(__file__).parent / "results"


def warm_up():
    """Pay a process's one-off costs (imports, first optimiser) outside the clock."""
    X, y = make_sparse_selection(64, seq_len=4, token_dim=2, n_selected=1, random_state=0)
    SparseTokenTransformer(pe_dim=4, max_epochs=1, random_state=0).fit(X, y)
    return torch.get_num_threads()


class FitCPUTime(Callback):
    """Record the CPU time of the training thread (torch runs on it alone here)."""

    def on_train_begin(self, net, **kwargs):
        self.start_ = time.thread_time()

    def on_train_end(self, net, **kwargs):
        net.fit_cpu_s_ = time.thread_time() - self.start_


#: R^2, and the fit's CPU seconds dressed as a score so cv_results_ carries it
SCORING = {"score": lambda est, X, y: est.score(X, y),
           "fit_cpu": lambda est, X, y: est.fit_cpu_s_}


def timed_search(search, X, y, backend):
    """Fit ``clone(search)`` inside ``backend()``: wall s, fits' CPU s, scores."""
    fitted = clone(search)
    with backend():
        start = time.perf_counter()
        fitted.fit(X, y)
        wall_s = time.perf_counter() - start
    results = fitted.cv_results_
    cpu_s = float(results["mean_test_fit_cpu"].sum() * fitted.n_splits_)
    return wall_s, cpu_s, results["mean_test_score"]


def start_cluster(stack, n_workers, dask_defaults=False):
    """A warmed-up local cluster: as ``dask_backend`` starts it, or Dask's own."""
    start = time.perf_counter()
    options = dict(n_workers=n_workers, threads_per_worker=1, dashboard_address=":0")
    if dask_defaults:
        cluster = stack.enter_context(distributed.LocalCluster(**options))
    else:
        cluster = _local_cluster(distributed, stack, options.pop("n_workers"), options)
    client = stack.enter_context(distributed.Client(cluster))
    threads = set(client.run(warm_up).values())
    return cluster, client, time.perf_counter() - start, threads


def run(size):
    X, y = make_sparse_selection(size["n_samples"], size["seq_len"], size["token_dim"],
                                 size["n_selected"], random_state=0)
    search = GridSearchCV(
        SparseTokenTransformer(max_epochs=size["max_epochs"], random_state=0,
                               callbacks=[FitCPUTime()]),
        {"pe_dim": size["pe_dims"]}, cv=size["cv"], scoring=SCORING, refit=False)
    with ExitStack() as stack:
        # (name, workers, backend, start-up s, torch threads seen by the fits)
        configs = []
        torch.set_num_threads(1)
        start = time.perf_counter()
        threads = {warm_up()}
        configs.append(("n_jobs=1", 1, lambda: joblib.parallel_config(n_jobs=1),
                        time.perf_counter() - start, threads))

        start = time.perf_counter()
        with joblib.parallel_config("loky", n_jobs=2):
            threads = set(joblib.Parallel()(joblib.delayed(warm_up)() for _ in range(2)))
        configs.append(("loky n_jobs=2", 2, lambda: joblib.parallel_config("loky", n_jobs=2),
                        time.perf_counter() - start, threads))

        cluster1, _, startup_s, threads = start_cluster(stack, 1)
        configs.append(("dask 1 worker", 1, lambda: dask_backend(cluster1),
                        startup_s, threads))
        cluster2, client2, startup_s, threads = start_cluster(stack, 2)
        configs.append(("dask 2 workers", 2, lambda: dask_backend(cluster2),
                        startup_s, threads))
        configs.append(("dask 2 workers, plain joblib", 2,
                        lambda: joblib.parallel_config("dask", client=client2),
                        startup_s, threads))
        cluster3, _, startup_s, threads = start_cluster(stack, 2, dask_defaults=True)
        configs.append(("dask 2 workers, Dask's malloc", 2, lambda: dask_backend(cluster3),
                        startup_s, threads))

        # Repeats go round the configurations, so that a slow spell on a
        # shared machine hits all of them alike.
        measured = {name: [] for name, *_ in configs}
        for repeat in range(size["repeats"]):
            for name, _, backend, _, _ in configs:
                measured[name].append(timed_search(search, X, y, backend))
                print(f"  repeat {repeat + 1}, {name}: {measured[name][-1][0]:.2f} s",
                      flush=True)

    rows = []
    for name, workers, _, startup_s, threads in configs:
        walls, cpus, scores = zip(*measured[name])
        rows.append(dict(config=name, workers=workers, wall_s=list(walls),
                         median_s=statistics.median(walls), fit_cpu_s=list(cpus),
                         median_cpu_s=statistics.median(cpus), startup_s=startup_s,
                         torch_threads=sorted(threads), scores=scores[-1].tolist()))
    baseline = rows[0]
    for row in rows:
        row["speedup"] = baseline["median_s"] / row["median_s"]
        row["cpu_ratio"] = row["median_cpu_s"] / baseline["median_cpu_s"]
        row["same_scores"] = bool(np.allclose(row["scores"], baseline["scores"], rtol=1e-6))
    return rows


def format_table(rows):
    lines = [f"{'configuration':<31}{'workers':>8}{'torch thr':>10}{'search s':>10}"
             f"{'speed-up':>10}{'fit CPU s':>11}{'CPU ratio':>11}{'start-up s':>12}"
             f"{'same scores':>13}"]
    for r in rows:
        lines.append(
            f"{r['config']:<31}{r['workers']:>8}{','.join(map(str, r['torch_threads'])):>10}"
            f"{r['median_s']:>10.2f}{r['speedup']:>9.2f}x{r['median_cpu_s']:>11.2f}"
            f"{r['cpu_ratio']:>10.2f}x{r['startup_s']:>12.1f}{str(r['same_scores']):>13}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small task, ~2 minutes")
    parser.add_argument("--repeats", type=int, help="timed searches per configuration")
    parser.add_argument("--out", type=Path, help="JSON file (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    name = "quick" if args.quick else "full"
    size = dict(SIZES[name])
    if args.repeats:
        size["repeats"] = args.repeats
    n_fits = len(size["pe_dims"]) * size["cv"]
    print(f"bench_dask ({name}): GridSearchCV of SparseTokenTransformer, {n_fits} fits of "
          f"{size['n_samples'] * (size['cv'] - 1) // size['cv']} sequences, "
          f"T={size['seq_len']}, d={size['token_dim']}, {size['max_epochs']} epochs; "
          f"median of {size['repeats']}; {os.cpu_count()} CPUs", flush=True)
    rows = run(size)
    print(format_table(rows))
    out = args.out or RESULTS / f"bench_dask_{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(
        benchmark="bench_dask", size=name, parameters=size, cpu_count=os.cpu_count(),
        versions=dict(python=platform.python_version(), torch=torch.__version__,
                      sklearn=sklearn.__version__, joblib=joblib.__version__,
                      distributed=distributed.__version__),
        baseline="n_jobs=1", results=rows), indent=2))
    print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    main()
