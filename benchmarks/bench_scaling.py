"""How fit time grows with seq_len, pe_dim / hidden_width and n_samples.

One size varies at a time, the others stay at the smallest setting; each fit
time is a ratio against the smallest size of its series, measured side by
side. ``time / size`` divides that by the size ratio: 1.0 is exactly linear,
below 1 sub-linear (fixed per-step costs), above 1 super-linear. The
transformer costs O(T * d_p + d_p^2) per sequence and positional draw, so its
time should be at most linear in seq_len and n_samples; so should the FCN's
(its first layer has T * (d + 1) inputs).

    python benchmarks/bench_scaling.py --quick
    python benchmarks/bench_scaling.py --device cuda
"""

import common
from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

TOKEN_DIM, N_SELECTED = 8, 3


def series(quick):
    """``(estimator, parameter, sizes, defaults)`` for every series."""
    n = 4000 if quick else 10000
    base = {"n_samples": n, "seq_len": 20}
    sizes = {
        "seq_len": [10, 20, 40, 80],
        "n_samples": [n, 2 * n, 4 * n] if quick else [n, 2 * n, 4 * n, 8 * n],
        "pe_dim": [32, 64, 128, 256],
        "hidden_width": [64, 128, 256, 512],
    }
    return [
        ("transformer", "seq_len", sizes["seq_len"], {**base, "pe_dim": 64}),
        ("transformer", "n_samples", sizes["n_samples"], {**base, "pe_dim": 64}),
        ("transformer", "pe_dim", sizes["pe_dim"], base),
        ("fcn", "seq_len", sizes["seq_len"], {**base, "hidden_width": 256}),
        ("fcn", "n_samples", sizes["n_samples"], {**base, "hidden_width": 256}),
        ("fcn", "hidden_width", sizes["hidden_width"], base),
    ]


def fit_case(model, params, *, epochs, batch_size, device):
    params = dict(params)
    X, y = make_sparse_selection(params.pop("n_samples"), params.pop("seq_len"),
                                 TOKEN_DIM, N_SELECTED, random_state=0)
    cls = SparseTokenTransformer if model == "transformer" else SparseTokenFCN
    est = cls(**params, max_epochs=epochs, batch_size=batch_size, device=device,
              random_state=0)
    return lambda: est.fit(X, y)


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=None,
                   help="default 256 on the CPU, 4096 on a GPU")
    args = p.parse_args()
    repeats = common.setup(args, repeats=5, quick_repeats=3)
    on_gpu = args.device.startswith("cuda")
    args.batch_size = args.batch_size or (4096 if on_gpu else 256)
    epochs = 1 if args.quick else 2
    scale = 10 if on_gpu else 1  # enough samples for large batches to matter

    rows = []
    for model, parameter, sizes, defaults in series(args.quick):
        cases = {}
        for size in sizes:
            params = {**defaults, parameter: size}
            params["n_samples"] *= scale
            cases[size] = fit_case(model, params, epochs=epochs,
                                   batch_size=args.batch_size, device=args.device)
        times = common.compare(cases, repeats=repeats, device=args.device)
        for size in sizes:
            ratio = common.ratio(times, size, sizes[0])
            rows.append({
                "model": model, "varies": parameter, "size": size,
                "seconds": common.median(times, size),
                "time vs smallest": ratio, "size vs smallest": size / sizes[0],
                "time / size": ratio / (size / sizes[0]),
                "times": times[size],
            })
    common.print_table(
        f"Fit time against size ({epochs} epoch(s), batch {args.batch_size}, "
        f"{args.device}, {args.threads} thread(s); median of {repeats})",
        ["model", "varies", "size", "seconds", "time vs smallest", "size vs smallest",
         "time / size"], rows)
    common.write_json(args, f"scaling_{args.device.split(':')[0]}", {"scaling": rows})


if __name__ == "__main__":
    main()
