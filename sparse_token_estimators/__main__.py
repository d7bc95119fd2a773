"""Command line: ``python -m sparse_token_estimators`` or ``sparse-token-reproduce``.

Runs the reproduction (``reproduce.run``) and writes the results file, the
tables, the figures and a Markdown summary into ``--out``.
"""

import argparse
import contextlib
import sys

import torch
from joblib import effective_n_jobs

from . import reproduce
from ._device import resolve_device
from ._layout import check_int
from .datasets import make_sparse_selection


def build_parser():
    parser = argparse.ArgumentParser(
        prog="sparse-token-reproduce",
        description=(
            "Reproduce 'Transformers Provably Learn Sparse Token Selection While "
            "Fully-Connected Nets Cannot' (Wang, Wei, Hsu & Lee, ICML 2024): width "
            "separation, length generalisation, alignment and width scaling, judged "
            "on the paper's one-draw model over several seeds, with the package's "
            "ensemble of positional draws beside it; and, beyond the paper, training "
            "on the population against a fixed sample, sample complexity, and five "
            "positional encodings compared."
        ),
    )
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_const", dest="scale", const="quick",
                       help="small sizes: about 6 minutes on 2 CPU cores (the default)")
    scale.add_argument("--scale", choices=sorted(reproduce.SCALES),
                       help="'paper': T=20, more samples, pe_dim up to 512, the scaling "
                            "law over T=10..40, learning curves over T=5..20; within the "
                            "hour on 2 CPU cores")
    parser.set_defaults(scale="quick")
    parser.add_argument("--out", default="results", help="output folder (default: results)")
    parser.add_argument("--device", default=None,
                        help="'auto' (GPU when present, the default), 'cpu' or 'cuda'")
    parser.add_argument("--seed", type=int, default=None,
                        help="first seed of data and models (default 0)")
    parser.add_argument("--seeds", type=int, default=None, dest="n_seeds",
                        help="number of seeds, each its own data and models "
                             "(default 3); every number is a mean and spread over them")
    sizes = parser.add_argument_group("task sizes (defaults depend on --scale)")
    sizes.add_argument("--seq-len", type=int, help="sequence length T")
    sizes.add_argument("--token-dim", type=int, help="token dimension d")
    sizes.add_argument("--n-selected", type=int, help="number q of selected tokens")
    sizes.add_argument("--n-samples", type=int, help="training sequences")
    parser.add_argument("--n-jobs", type=int, default=None,
                        help="parallel fits in the searches (default -1: all cores)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run the searches on a Dask cluster at ADDRESS "
                             "(needs the 'distributed' extra)")
    parser.add_argument("--no-plots", action="store_true",
                        help="write tables and summary only (no matplotlib needed)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress display")
    return parser


def _check_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(
            "The figures need matplotlib: pip install 'sparse-token-estimators[plots]' "
            "(or pass --no-plots)."
        ) from None


@contextlib.contextmanager
def _dask_backend(address):
    """Send joblib's work (the searches' fits) to the Dask cluster at ``address``."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise SystemExit(
            "--scheduler needs dask.distributed: pip install "
            "'sparse-token-estimators[distributed]'"
        ) from None
    from .distributed import dask_backend

    with dask_backend(address) as client:
        print(f"running the searches on {client}", file=sys.stderr)
        yield


def main(argv=None):
    """Entry point of ``python -m sparse_token_estimators``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.no_plots:
        _check_matplotlib()
    config = reproduce.with_sizes(
        reproduce.SCALES[args.scale], seq_len=args.seq_len, token_dim=args.token_dim,
        n_selected=args.n_selected, n_samples=args.n_samples, seed=args.seed,
        n_seeds=args.n_seeds,
        device=args.device, n_jobs=args.n_jobs,
    )
    try:  # refuse bad sizes or devices now, not in a worker minutes later
        check_int(config.n_samples, "n_samples")
        check_int(config.n_seeds, "seeds")
        make_sparse_selection(1, config.seq_len, config.token_dim, config.n_selected)
        resolve_device(config.device)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    if args.scheduler or effective_n_jobs(config.n_jobs) > 1:
        # The fits run in workers (one torch thread each); this process only
        # predicts, and extra threads here would compete with the workers.
        torch.set_num_threads(1)
    backend = _dask_backend(args.scheduler) if args.scheduler else contextlib.nullcontext()
    with backend:
        results = reproduce.run(config, progress=not args.no_progress)
    written = reproduce.write_outputs(results, args.out, plots=not args.no_plots)
    for claim in results["claims"]:
        verdict = "supported" if claim["supported"] else "NOT supported"
        print(f"{claim['claim']}: {verdict} on the mean of {claim['n_seeds']} seeds "
              f"({claim['seeds_supporting']} of {claim['n_seeds']} on their own)")
    print(f"wrote {len(written)} files to {args.out}/ in {results['elapsed_s']:.0f} s; "
          f"see {args.out}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
