"""``critical_width`` with its two trainers, against the same fits made alone by hand.

The paper's model (``SparseTokenTransformer``, 1 positional draw, batch 32,
the scaling law's recipe: Adam with the rate decayed by a cosine) at
d = 8, q = 3 and each T of ``--seq-lens`` (default 16, 32, 64, the
reproduction's), 4096 training sequences (the paper preset's), searched
over ``pe_dim`` from ``--start`` with 3 rates and 3 seeds (a width's group:
9 fits; the steps check's: 3), the whole search run three ways, side by
side in rotating order:

- ``lone``: the fits of the exact search's table (width, rate, seed, steps),
  each made alone by hand, one after the other, and scored (the baseline:
  what the search costs without its own work);
- ``exact``: ``trainer="exact"``, the default (each fit its lone fit, one
  after another; its table is checked against the lone fits' scores);
- ``fused``: ``trainer="fused"``, each group one stacked model (equal to the
  lone fits to float rounding: the largest difference of a validation
  score is reported, and whether the width is the same).

Reported per T: the search's fits and widths, its time per case, and the
speed-up lone / case (the median over the repeats of the per-repeat ratio;
above 1: faster than lone fits), on the CPU clock and the wall clock (on a
busy machine the CPU clock is the steadier). The issue's bar: exact >= 0.95x,
fused >= 1.5x.

    python benchmarks/bench_critical_width_group.py
    python benchmarks/bench_critical_width_group.py --quick --seq-lens 16
    python benchmarks/bench_critical_width_group.py --device cuda
"""

import math

import torch
from sklearn.base import clone

import common
from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.model_selection import critical_width

TOKEN_DIM, N_SELECTED = 8, 3
RATES = (0.003, 0.01, 0.03)
SEEDS = (0, 1, 2)


def _rows(args, seq_len, n_samples, repeats):
    """The three cases' rows at ``seq_len``, timed side by side."""
    X, y = make_sparse_selection(n_samples, seq_len, TOKEN_DIM, N_SELECTED, random_state=0)
    validation = make_sparse_selection(512, seq_len, TOKEN_DIM, N_SELECTED, random_state=1)
    est = SparseTokenTransformer(n_pe_draws=1, max_epochs=args.epochs, batch_size=32,
                                 lr_schedule="cosine", device=args.device)
    results = {}

    def search(case):
        def run():
            results[case] = critical_width(
                est, "pe_dim", X, y, lr_grid=RATES, seeds=SEEDS, start=args.start,
                stop=args.stop, target=args.target, validation=validation, trainer=case)
        return run

    search("exact")()  # its table: the fits the lone case makes
    settings = [(r["width"], r["lr"], r["seed"], r["steps_multiplier"])
                for r in results["exact"].table]
    scores = []

    def lone():
        scores.clear()
        for width, lr, seed, multiplier in settings:
            net = clone(est).set_params(pe_dim=width, lr=lr, random_state=seed,
                                        max_epochs=args.epochs * multiplier).fit(X, y)
            scores.append(net.score(*validation))

    times = common.compare({"lone": lone, "exact": search("exact"), "fused": search("fused")},
                           repeats=repeats, device=args.device)
    exact = results["exact"]
    assert [r["val_score"] for r in exact.table] == scores, "exact differs from lone fits"
    rows = []
    for case, result in {"lone": exact, "exact": exact, "fused": results["fused"]}.items():
        lone = exact  # its scores are the lone fits' (checked above)
        same = ([(r["width"], r["lr"], r["seed"]) for r in result.table]
                == [(r["width"], r["lr"], r["seed"]) for r in lone.table])
        gap = max((abs(a["val_score"] - b["val_score"]) for a, b in
                   zip(result.table, lone.table)), default=math.nan) if same else math.nan
        rows.append({
            "T": seq_len, "case": case, "fits": len(result.table),
            "widths": ",".join(str(w) for w in result.scores),
            "status": f"{result.status} {result.bracket}",
            "cpu s": common.median(times, case, "cpu"),
            "wall s": common.median(times, case, "wall"),
            "speed-up (cpu)": 1 / common.ratio(times, case, "lone", "cpu"),
            "speed-up (wall)": 1 / common.ratio(times, case, "lone", "wall"),
            "same width": result.width == lone.width and result.status == lone.status,
            "max |val R^2 - lone|": gap,
        })
    return rows, times


def main():
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--seq-lens", default="16,32,64",
                   help="the T searched (default 16,32,64: the reproduction's scaling law)")
    p.add_argument("--samples", type=int, default=None,
                   help="training sequences (default 4096; --quick 1024)")
    p.add_argument("--epochs", type=int, default=2, help="epochs of a fit (default 2)")
    p.add_argument("--target", type=float, default=0.6,
                   help="the search's target R^2 (default 0.6: a bracket, a bisection, "
                        "the steps check)")
    p.add_argument("--start", type=int, default=8, help="first pe_dim (default 8)")
    p.add_argument("--stop", type=int, default=128, help="widest pe_dim (default 128)")
    args = p.parse_args()
    repeats = common.setup(args, repeats=5, quick_repeats=3)
    n_samples = args.samples or (1024 if args.quick else 4096)
    rows, times = [], {}
    for seq_len in (int(t) for t in args.seq_lens.split(",")):
        found, times[seq_len] = _rows(args, seq_len, n_samples, repeats)
        common.print_table(f"T = {seq_len}", list(found[0]), found)
        rows += found
    common.print_table(
        f"critical_width, the paper's model, d = {TOKEN_DIM}, q = {N_SELECTED}, "
        f"{len(RATES)} rates x {len(SEEDS)} seeds, {args.epochs} epoch(s) of {n_samples} "
        f"sequences, batch 32, cosine rate ({args.device}, {torch.get_num_threads()} "
        f"thread(s), median of {repeats})", list(rows[0]), rows)
    common.write_json(args, "bench_critical_width_group", {"rows": rows, "times": times})


if __name__ == "__main__":
    main()
