"""Do the default training settings learn?  Held-out R^2 and fit time.

Fits ``SparseTokenTransformer()`` and ``SparseTokenFCN(hidden_width=m)`` at their
default training settings (lr, max_epochs, batch_size, pe_dim, n_pe_draws) on a
few task sizes and prints one row per fit; ``--json`` also writes the rows.
Single runs; "fit s" is wall-clock, "cpu s" the process CPU time (a fairer
figure on a shared machine), both comparable only within one invocation.

    PYTHONPATH=. python benchmarks/defaults_learn.py --threads 1 --json defaults.json
"""

import argparse
import json
import time

import torch

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

TASKS = [(20, 8, 3), (40, 4, 2), (10, 16, 5)]  # (seq_len T, token_dim d, n_selected q)
FCN_WIDTHS = [64, 256, 1024, 4096]


def run(estimator, task, n_train, n_test, seed):
    seq_len, token_dim, n_selected = task
    X, y = make_sparse_selection(n_train, seq_len, token_dim, n_selected, random_state=seed)
    X_test, y_test = make_sparse_selection(n_test, seq_len, token_dim, n_selected,
                                           random_state=seed + 1)
    start, start_cpu = time.perf_counter(), time.process_time()
    estimator.fit(X, y)
    fit_s, cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    return {"estimator": type(estimator).__name__,
            "hidden_width": getattr(estimator, "hidden_width", None),
            "T": seq_len, "d": token_dim, "q": n_selected, "n_train": n_train,
            "test_r2": round(float(estimator.score(X_test, y_test)), 4),
            "train_loss": round(float(estimator.history[-1, "train_loss"]), 4),
            "fit_s": round(fit_s, 1), "cpu_s": round(cpu_s, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--n-train", type=int, default=20000)
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--fcn-tasks", type=int, default=2,
                        help="run the FCN widths on the first N tasks")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    jobs = [(SparseTokenTransformer(random_state=0), task) for task in TASKS]
    jobs += [(SparseTokenFCN(hidden_width=m, random_state=0), task)
             for task in TASKS[:args.fcn_tasks] for m in FCN_WIDTHS]
    rows = []
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'estimator':24s} {'m':>5s} {'T':>3s} {'d':>3s} {'q':>2s} "
          f"{'test R2':>8s} {'loss':>7s} {'fit s':>6s} {'cpu s':>6s}", flush=True)
    for estimator, task in jobs:
        row = run(estimator, task, args.n_train, args.n_test, seed=0)
        rows.append(row)
        print(f"{row['estimator']:24s} {row['hidden_width'] or '':>5} {row['T']:3d} "
              f"{row['d']:3d} {row['q']:2d} {row['test_r2']:8.4f} {row['train_loss']:7.4f} "
              f"{row['fit_s']:6.1f} {row['cpu_s']:6.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
