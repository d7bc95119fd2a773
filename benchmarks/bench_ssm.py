"""Fit time of the selective state-space model (SparseTokenSSM, Mamba) against the GRU.

At each (layout, T, width), the SSM (``d_state`` 16, the reproduction's, and
``--d-states`` more) and the GRU (``SparseTokenRNN``, ``hidden_size`` = the
width) fit the same sequences with the reproduction's architecture training
(Adam, batch 64; ``--epochs`` passes over ``--n-train`` sequences), side by
side in a rotating order (``common.compare``); the table gives the median
seconds per fit and the ratio SSM / GRU of the same repeat. The quick
scale's architectures experiment fits both at these widths and lengths
(indicator layout at T = 10, query layout at T = 8 to 64): the ratio says
how much longer its SSM searches take than its GRU searches::

    python benchmarks/bench_ssm.py            # the quick scale's T and widths
    python benchmarks/bench_ssm.py --quick    # fewer cases, about a minute
"""

from common import compare, median, parser, print_table, ratio, setup, write_json
from sparse_token_estimators import SparseTokenRNN, SparseTokenSSM, make_sparse_selection

#: (layout, T): the quick scale's architectures searches (rows T + q in the query layout)
LENGTHS = (("indicator", 10), ("query", 8), ("query", 16), ("query", 32), ("query", 64))
WIDTHS = (8, 32, 64)


def estimators(width, d_states, layout, epochs, device):
    common = dict(lr=0.01, max_epochs=epochs, batch_size=64, random_state=0, device=device,
                  layout=layout)
    cases = {"GRU": SparseTokenRNN(hidden_size=width, **common)}
    for n in d_states:
        cases[f"SSM d_state {n}"] = SparseTokenSSM(d_model=width, d_state=n, **common)
    return cases


def main():
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--n-train", type=int, default=2048, help="sequences per fit (default 2048)")
    p.add_argument("--epochs", type=int, default=1, help="epochs per fit (default 1)")
    p.add_argument("--d-states", type=int, nargs="+", default=[16, 4],
                   help="the SSM's state sizes (default 16 4)")
    p.add_argument("--token-dim", type=int, default=8)
    p.add_argument("--n-selected", type=int, default=3)
    args = p.parse_args()
    repeats = setup(args, repeats=2, quick_repeats=1)
    lengths = LENGTHS[:2] if args.quick else LENGTHS
    widths = WIDTHS[:2] if args.quick else WIDTHS
    print(f"fit time, {args.n_train} sequences x {args.epochs} epochs, batch 64, d = "
          f"{args.token_dim}, q = {args.n_selected}, {args.threads} torch thread(s), "
          f"{args.device}; median of {repeats} repeats")
    rows, raw = [], {}
    for layout, T in lengths:
        X, y = make_sparse_selection(args.n_train, T, args.token_dim, args.n_selected,
                                     layout=layout, random_state=0)
        for width in widths:
            ests = estimators(width, args.d_states, layout, args.epochs, args.device)
            times = compare({name: (lambda est=est, X=X, y=y: est.fit(X, y))
                             for name, est in ests.items()},
                            repeats=repeats, device=args.device)
            raw[f"{layout}-T{T}-w{width}"] = times
            row = {"layout": layout, "T": T, "width": width,
                   "GRU s": median(times, "GRU")}
            for name in ests:
                if name != "GRU":
                    row[f"{name} s"] = median(times, name)
                    row[f"{name} / GRU (wall)"] = ratio(times, name, "GRU")
                    row[f"{name} / GRU (CPU)"] = ratio(times, name, "GRU", clock="cpu")
            rows.append(row)
            print(f"  {layout} T={T} width={width}: " + ", ".join(
                f"{k} {v:.3g}" for k, v in row.items() if k.endswith("(wall)")), flush=True)
    print_table("Fit time: the SSM (SparseTokenSSM) against the GRU (SparseTokenRNN) at the same "
                "width and T", list(rows[0]), rows)
    write_json(args, "bench_ssm", {"rows": rows, "times": raw})


if __name__ == "__main__":
    main()
