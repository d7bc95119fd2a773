"""``make_sparse_selection`` against drawing the same number of normals with numpy.

The task's cost floor is drawing its n * T * d Gaussian tokens; everything
else (the subset of every sequence, the indicator channel, the targets) is
overhead. Baselines, each ``n * T * d`` standard normals from a fresh
``numpy.random.default_rng``: numpy's default float64 draw
(``standard_normal(shape)``) and the float32 draw the generator itself makes.

Target: ``make_sparse_selection`` <= 1.2x numpy's default draw.

    python benchmarks/bench_generator.py --quick
"""

import numpy as np

import common
from sparse_token_estimators import make_sparse_selection


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    args = p.parse_args()
    repeats = common.setup(args, repeats=9, quick_repeats=5)
    n_samples = 20000 if args.quick else 100000
    shapes = [(20, 8, 3), (80, 8, 3), (20, 2, 3)]  # (seq_len, token_dim, n_selected)

    rows = []
    for seq_len, token_dim, n_selected in shapes:
        shape = (n_samples, seq_len, token_dim)
        # The loop's values are bound as defaults: each closure times its own shape.
        cases = {
            "make_sparse_selection": lambda T=seq_len, d=token_dim, q=n_selected:
                make_sparse_selection(n_samples, T, d, q, random_state=0),
            "normals, float64": lambda shape=shape:
                np.random.default_rng(0).standard_normal(shape),
            "normals, float32": lambda shape=shape:
                np.random.default_rng(0).standard_normal(shape, dtype=np.float32),
        }
        times = common.compare(cases, repeats=repeats)
        for case in times:
            rows.append({
                "n, T, d, q": f"{n_samples}, {seq_len}, {token_dim}, {n_selected}",
                "case": case, "seconds": common.median(times, case),
                "time vs float64 normals": common.ratio(times, case, "normals, float64"),
                "time vs float32 normals": common.ratio(times, case, "normals, float32"),
                "CPU time vs float64 normals": common.ratio(
                    times, case, "normals, float64", "cpu"),
                "times": times[case],
            })
    common.print_table(
        f"make_sparse_selection against numpy normals; median of {repeats}",
        ["n, T, d, q", "case", "seconds", "time vs float64 normals",
         "time vs float32 normals", "CPU time vs float64 normals"], rows)
    common.write_json(args, "generator", {"generator": rows})


if __name__ == "__main__":
    main()
