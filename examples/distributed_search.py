"""
Width sweep of the paper's two estimators on a Dask cluster
===========================================================

The same ``GridSearchCV`` code as on one machine: ``dask_backend`` sends its
fits to a Dask cluster through joblib. Without ``--scheduler`` a local cluster
starts (one single-threaded worker process per core, or ``--n-workers``). It
prints one row per width: the cross-validated R^2 of the transformer over its
positional width d_p (``pe_dim``; its width is d + d_p) and of the
fully-connected net over its hidden width m (``hidden_width``).

Run it as a script (it needs ``pip install -e ".[distributed]"`` in the clone)::

    python examples/distributed_search.py                                  # local cluster
    python examples/distributed_search.py --scheduler tcp://10.0.0.1:8786  # running cluster
    python examples/distributed_search.py 2000                             # 2000 sequences
    python examples/distributed_search.py --size tiny                      # a smoke test

The documentation runs it with ``--size tiny`` on a local cluster of two
workers, so its table shows that the sweep runs, not what the widths reach.
"""

# %%
# The sweep
# ---------
# Two searches, built as on one machine, and the sizes of the task.
import argparse
import contextlib
import logging
import time

from sklearn.model_selection import GridSearchCV

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.distributed import dask_backend

#: the task (n_samples, seq_len T, token_dim d, n_selected q), training and sweep
SIZES = {
    "tiny": dict(n_samples=400, seq_len=6, token_dim=3, n_selected=2, max_epochs=3,
                 batch_size=32, pe_dims=[4, 8], hidden_widths=[8, 32], cv=2),
    "small": dict(n_samples=6000, seq_len=12, token_dim=4, n_selected=2, max_epochs=10,
                  batch_size=256, pe_dims=[4, 8, 16, 32],
                  hidden_widths=[16, 64, 256, 1024], cv=3),
}


def width_sweep(size, random_state=0):
    """The two searches of the sweep, unfitted, and the data they run on."""
    X, y = make_sparse_selection(size["n_samples"], size["seq_len"], size["token_dim"],
                                 size["n_selected"], random_state=random_state)
    common = dict(max_epochs=size["max_epochs"], batch_size=size["batch_size"],
                  random_state=random_state)
    searches = [
        GridSearchCV(SparseTokenTransformer(**common), {"pe_dim": size["pe_dims"]},
                     cv=size["cv"], refit=False),
        GridSearchCV(SparseTokenFCN(**common), {"hidden_width": size["hidden_widths"]},
                     cv=size["cv"], refit=False),
    ]
    return searches, X, y


def table_rows(search, token_dim):
    """One dict per searched width, from a fitted search's ``cv_results_``."""
    (param,) = search.param_grid
    results = search.cv_results_
    rows = []
    for i, value in enumerate(results[f"param_{param}"]):
        rows.append(dict(
            estimator=type(search.estimator).__name__, parameter=param, value=int(value),
            width=int(value) + token_dim if param == "pe_dim" else int(value),
            r2_mean=float(results["mean_test_score"][i]),
            r2_std=float(results["std_test_score"][i]),
            fit_s=float(results["mean_fit_time"][i]),
        ))
    return rows


def format_table(rows):
    """The rows as a text table."""
    lines = [f"{'estimator':<24}{'parameter':<14}{'value':>6}{'width':>7}"
             f"{'R^2 (cv mean +- std)':>24}{'fit s':>8}"]
    for r in rows:
        lines.append(f"{r['estimator']:<24}{r['parameter']:<14}{r['value']:>6}"
                     f"{r['width']:>7}{r['r2_mean']:>15.3f} +- {r['r2_std']:.3f}"
                     f"{r['fit_s']:>8.2f}")
    return "\n".join(lines)


# %%
# On the cluster
# --------------
# ``dask_backend`` connects to the scheduler at ``--scheduler`` (or starts a
# local cluster), and inside it every joblib-parallel fit of the searches runs
# on a worker. The estimators need nothing special: they pickle to the workers
# and resolve ``device="auto"`` there.


class _NoKillNotice(logging.Filter):
    """Drop the nanny's notice that it killed a worker at close.

    A local cluster closes its workers with Dask's grace of 4 s; a worker
    process that has imported torch can take longer to exit on a busy
    machine, and the nanny then kills it and logs a warning. It happens only
    once the work is done, and nothing is lost.
    """

    def filter(self, record):
        return "still alive after" not in record.getMessage()


def main(argv=None):
    """Run the sweep on the cluster named by ``argv`` and print its table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="address of a running Dask scheduler, e.g. "
                             "tcp://10.0.0.1:8786 (default: start a local cluster)")
    parser.add_argument("--n-workers", type=int,
                        help="workers of the local cluster (default: one per core)")
    parser.add_argument("n_samples", nargs="?", type=int,
                        help="training sequences (default: the --size's)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    if args.scheduler and args.n_workers:
        parser.error("--n-workers applies to the local cluster only, not to --scheduler")

    if args.n_samples is not None and args.n_samples < 2 * SIZES[args.size]["cv"]:
        parser.error(f"n_samples must be at least {2 * SIZES[args.size]['cv']} for "
                     f"{SIZES[args.size]['cv']}-fold cross-validation; got {args.n_samples}")
    size = dict(SIZES[args.size], **({} if args.n_samples is None
                                     else {"n_samples": args.n_samples}))
    searches, X, y = width_sweep(size, random_state=args.random_state)
    start = time.perf_counter()
    # The local cluster's dashboard on a free port of this machine: the example
    # runs beside other Dask clusters (Dask's default port, 8787, may be taken).
    cluster = ({} if args.scheduler else
               {"n_workers": args.n_workers, "dashboard_address": "127.0.0.1:0"})
    logging.getLogger("distributed.nanny").addFilter(_NoKillNotice())
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(dask_backend(args.scheduler, **cluster))
        except ImportError as exc:  # without dask: what to install, no traceback
            parser.error(str(exc))
        print(f"Dask: {client}")
        for search in searches:
            search.fit(X, y)
    rows = [row for search in searches for row in table_rows(search, size["token_dim"])]
    print(f"Width sweep: {len(X)} sequences, T={size['seq_len']}, d={size['token_dim']}, "
          f"q={size['n_selected']}, {size['cv']}-fold CV")
    print(format_table(rows))
    print(f"took {time.perf_counter() - start:.1f} s")
    return rows


# %%
# The sweep as a figure
# ---------------------
# Cross-validated R^2 against width, the two estimators on one axis (the
# transformer's width is d + d_p, the fully-connected net's m).
if __name__ == "__main__":
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    rows = main()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in dict.fromkeys(r["estimator"] for r in rows):
        mine = [r for r in rows if r["estimator"] == name]
        ax.errorbar([r["width"] for r in mine], [r["r2_mean"] for r in mine],
                    yerr=[r["r2_std"] for r in mine], marker="o", capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set(xlabel="width (transformer: d + pe_dim; FCN: hidden_width)",
           ylabel="cross-validated R^2", title="The width sweep, fitted on Dask workers")
    ax.legend()
    fig.tight_layout()
    plt.show()
