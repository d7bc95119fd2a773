"""``GridSearchCV`` with ``n_jobs=1`` against ``n_jobs=2`` (or more) on the CPU.

joblib's process workers (loky) each get ``cores // n_jobs`` threads, and
torch follows that limit, so parallel workers do not oversubscribe the cores.
The ``n_jobs=1`` baseline runs in this process with one torch thread; a second
row shows ``n_jobs=1`` with torch using every core (its default), to compare
thread-level with process-level parallelism. The workers are started by a
warm-up run, so the figures are for a started pool.

Target (2 cores): ``n_jobs=2`` >= 1.6x faster than ``n_jobs=1``.

    python benchmarks/bench_search.py --quick
"""

import os

import torch
from sklearn.model_selection import GridSearchCV

import common
from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection


def search(estimator, grid, X, y, n_jobs, threads):
    def run():
        torch.set_num_threads(threads)
        GridSearchCV(estimator, grid, cv=3, n_jobs=n_jobs).fit(X, y)
    return run


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    args = p.parse_args()
    repeats = common.setup(args, repeats=3, quick_repeats=2)
    if args.device != "cpu":
        raise SystemExit("bench_search compares CPU processes; run it with --device cpu.")
    cores = os.cpu_count()
    X, y = make_sparse_selection(3000 if args.quick else 6000, 20, 8, 3, random_state=0)
    # A fifth (--quick) or a third of each estimator's default max_epochs
    # (15 transformer, 30 FCN): fits of a realistic length for each.
    share = 5 if args.quick else 3
    searches = {
        "transformer": (SparseTokenTransformer(device="cpu", random_state=0),
                        {"pe_dim": [32, 64], "lr": [0.01, 0.02]}),
        "fcn": (SparseTokenFCN(device="cpu", random_state=0),
                {"hidden_width": [64, 256], "lr": [0.001, 0.003]}),
    }
    for estimator, _ in searches.values():
        estimator.set_params(max_epochs=estimator.max_epochs // share)
    rows, epochs = [], {}
    for model, (estimator, grid) in searches.items():
        epochs[model] = estimator.max_epochs
        cases = {
            "n_jobs=1": search(estimator, grid, X, y, 1, args.threads),
            f"n_jobs=1, {cores} torch threads": search(estimator, grid, X, y, 1, cores),
            f"n_jobs={cores}": search(estimator, grid, X, y, cores, args.threads),
        }
        times = common.compare(cases, repeats=repeats)
        torch.set_num_threads(args.threads)
        for case in times:
            rows.append({
                "model": model, "epochs": epochs[model], "case": case,
                "seconds": common.median(times, case),
                "speed-up vs n_jobs=1": 1 / common.ratio(times, case, "n_jobs=1"),
                "times": times[case],
            })
    common.print_table(
        f"GridSearchCV (4 candidates x 3 folds, {len(X)} samples) "
        f"on {cores} cores; median of {repeats}",
        ["model", "epochs", "case", "seconds", "speed-up vs n_jobs=1"], rows)
    common.write_json(args, "search", {"search": rows})


if __name__ == "__main__":
    main()
