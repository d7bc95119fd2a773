"""The architectures comparison's dispatch, simulated with the cost model: its hours and the
workers' utilisation on 2, 16 and 64 workers.

The run's own scheduler (``reproduce._dispatch.dispatch``: no round barrier, the
costliest job first, groups split where a worker would idle) drives the
architectures experiment at the paper's sizes (``--scale architectures-paper``)
on a virtual clock: every planned fit and every search, the searches steered by
made-up scores (``reproduce._plan.synthetic_r2``), each job lasting its fits'
``Fit.cost`` (the cost model's CPU seconds, times ``--factor``). Utilisation:
busy worker-seconds over workers x wall. Nothing is fitted; it takes seconds.
The same for the quick and the paper runs with ``--all``.

Target (issue 50): utilisation >= 0.90 at 16 and at 64 workers. Measured
(2026-12-05): 0.91 at 16 and 0.31 at 64 (0.59 and 0.20 before the rivals waited
only on the encoders at their own T); at 64 the longest chain of dependent rounds
(the encoders up to T = 128, then Mamba there: 22 min) bounds it at about 0.32.

    python benchmarks/bench_dispatch.py

(From a git worktree, put the worktree first on the path, ``PYTHONPATH=.``: the
script's own folder comes first otherwise, and an installed copy is imported.)
"""

import argparse

from sparse_token_estimators.reproduce import SCALES
from sparse_token_estimators.reproduce._plan import estimate


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 16, 64])
    parser.add_argument("--factor", type=float, default=1.0,
                        help="this machine's speed against the cost model's (the run's plan "
                             "prints it; default 1)")
    parser.add_argument("--all", action="store_true", help="every run, not only the "
                                                           "architectures comparison")
    args = parser.parse_args()
    scales = list(SCALES) if args.all else ["architectures-paper"]
    print("| run | workers | fits (planned + searches, expected) | CPU h | wall h | "
          "utilisation |")
    print("|---|---:|---:|---:|---:|---:|")
    for scale in scales:
        for n in args.workers:
            plan = estimate(SCALES[scale], n, factor=args.factor)
            print(f"| {scale} | {n} | {plan.planned_fits} + {plan.search_fits} | "
                  f"{plan.cpu_s / 3600:.2f} | {plan.wall_s / 3600:.2f} | "
                  f"{plan.utilisation:.2f} |")


if __name__ == "__main__":
    main()
