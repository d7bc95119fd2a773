"""Does ``compile=True`` pay?  Compiled against eager fit time, compile time apart.

Fits ``SparseTokenTransformer`` (T=20, d=8, q=3, ``--n-samples`` sequences,
``--epochs`` epochs, batch 256) with and without skorch's ``compile=True``
(``torch.compile``, inductor backend) and reports:

- **compile s**: the first compiled fit minus a warm one, i.e. what tracing
  and code generation cost, paid once per process and model shape (with
  torch's on-disk caches empty: the script points them at a fresh folder);
- **eager s**, **compiled s**: a fit with everything compiled already (the
  median of ``--repeats`` side-by-side fits, common.compare), and their ratio;
- **break-even epochs**: how many epochs of this size a fit needs before the
  compiled one, compile included, is the faster (never, if it is not faster).

    python benchmarks/bench_compile.py --quick
    python benchmarks/bench_compile.py                 # ~5 min on one core
    python benchmarks/bench_compile.py --device cuda   # on a GPU machine
"""

import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache

import common
from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection

TASK = dict(seq_len=20, token_dim=8, n_selected=3)

#: (label, estimator parameters beyond the defaults); the package's default
#: model averages n_pe_draws=8 draws, the paper's model is n_pe_draws=1
CASES = [
    ("stochastic, n_pe_draws=8 (default)", dict(positional_encoding="stochastic")),
    ("stochastic, n_pe_draws=1 (paper)", dict(positional_encoding="stochastic", n_pe_draws=1)),
    ("stochastic, pe_dim=256", dict(positional_encoding="stochastic", pe_dim=256)),
    # pe_dim not a multiple of 32: the sign words do not split into whole
    # vectors, and the expansion indexes one flat bit stream
    ("stochastic, pe_dim=48", dict(positional_encoding="stochastic", pe_dim=48)),
    ("fixed", dict(positional_encoding="fixed")),
    ("randomized, n_pe_draws=8", dict(positional_encoding="randomized")),
]


def fitter(params, X, y, *, compile, epochs, device):
    def fit():
        SparseTokenTransformer(compile=compile, max_epochs=epochs, random_state=0,
                               device=device, **params).fit(X, y)
    return fit


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--n-samples", type=int, default=20000)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    repeats = common.setup(args, repeats=3, quick_repeats=2)
    cases = CASES
    if args.quick:
        args.n_samples, args.epochs, cases = 5000, 2, CASES[:2]
    X, y = make_sparse_selection(args.n_samples, random_state=0, **TASK)

    rows = []
    for label, params in cases:
        eager = fitter(params, X, y, compile=False, epochs=args.epochs, device=args.device)
        compiled = fitter(params, X, y, compile=True, epochs=args.epochs, device=args.device)
        torch._dynamo.reset()
        counters.clear()
        # empty compiler caches for every case (an earlier case's kernels on
        # disk would make its compile look cheaper); its warm fits reuse them
        with fresh_cache():
            cold_wall, cold_cpu = common.timed(compiled, args.device)
            graphs = counters["stats"]["unique_graphs"]
            times = common.compare({"eager": eager, "compiled": compiled}, repeats=repeats,
                                   device=args.device)
        recompiled = counters["stats"]["unique_graphs"] - graphs
        warm = common.median(times, "compiled")
        gain = common.median(times, "eager") - warm  # seconds saved per fit
        compile_s = cold_wall - warm
        rows.append({
            "case": label, "params": params,
            "compile s": compile_s,
            "eager s": common.median(times, "eager"),
            "compiled s": warm,
            "compiled / eager": common.ratio(times, "compiled", "eager"),
            "cpu compiled / eager": common.ratio(times, "compiled", "eager", clock="cpu"),
            "break-even epochs": (f"{args.epochs * compile_s / gain:.0f}" if gain > 0
                                  else "never"),
            "graphs": graphs, "graphs in warm fits": recompiled,
            "cold": {"wall": cold_wall, "cpu": cold_cpu}, "times": times,
        })
        print(f"{label}: compile {compile_s:.1f} s, compiled / eager "
              f"{rows[-1]['compiled / eager']:.2f}", flush=True)
    common.print_table(
        f"Fit of SparseTokenTransformer, T={TASK['seq_len']}, d={TASK['token_dim']}, "
        f"q={TASK['n_selected']}, {args.n_samples} sequences, {args.epochs} epochs, "
        f"batch 256; {args.device}, {args.threads} thread(s); median of {repeats}",
        ["case", "compile s", "eager s", "compiled s", "compiled / eager",
         "cpu compiled / eager", "break-even epochs", "graphs", "graphs in warm fits"],
        rows)
    common.write_json(args, "bench_compile", {"task": TASK, "rows": rows})


if __name__ == "__main__":
    main()
