"""Per family: a search's grid trained fused (``fit_group``) against the same fits alone.

For each family (the paper's model, the FCN, the RoPE encoder, the GRU) at
the quick preset's search sizes (and the paper's model at T = 16, d_p = 16,
where a step is mostly per-operation overhead), a group of G fits (G = 9 by
default: 3 rates x 3 seeds, as the reproduction's groups, each on its own
seed's stream of fresh sequences) is trained two ways, side by side in
rotating order:

- ``lone``: the G estimators' own ``fit``, one after the other (the
  baseline; also what ``trainer="exact"`` does);
- ``fused``: ``fit_group(..., trainer="fused")``: each fit its own ``fit``,
  their module's forward and backward stacked (``_fused``; equal to the lone
  fits to float rounding). A family whose class declares no
  ``fused_trainer`` is measured through a subclass that declares one
  (``StackedTrainer``): what declaring it would pay. The rule: a
  family keeps its fused trainer where it pays >= 1.3x per model.

Reported per model: the lone fit's time and the speed-up lone / fused (the
median over the repeats of the per-repeat ratio; above 1: the group is
faster), on the CPU clock and the wall clock (on a busy machine the CPU
clock is the steadier; on a GPU only the wall clock counts), and whether the
family's class declares the fused trainer.

    python benchmarks/bench_group.py --quick
    python benchmarks/bench_group.py --device cuda
"""

import torch

import common
from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
)
from sparse_token_estimators._fused import StackedTrainer
from sparse_token_estimators._group import fit_group

TOKEN_DIM, N_SELECTED = 8, 3
RATES = (0.003, 0.01, 0.03)

#: family -> (estimator, its width parameter and value, sequence length T, batch size)
FAMILIES = {
    "paper's model": (SparseTokenTransformer, {"pe_dim": 76, "n_pe_draws": 1}, 64, 32),
    # a small one, where a step is all per-operation overhead (a search's narrow widths)
    "paper's model (small)": (SparseTokenTransformer, {"pe_dim": 16, "n_pe_draws": 1}, 16, 32),
    "FCN": (SparseTokenFCN, {"hidden_width": 128}, 16, 256),
    "encoder (RoPE)": (SparseTokenEncoder, {"d_model": 16, "n_heads": 1,
                                           "positional_encoding": "rope"}, 32, 64),
    "GRU": (SparseTokenRNN, {"hidden_size": 32, "cell": "gru"}, 16, 64),
}


def _training_draws(net, x):
    """The encoder's training draws, as its ``infer`` makes them."""
    return {"noise": net.module_.draw_noise(x, generator=net.torch_rng_)}


def _fusing(kind):
    """``kind``, or a subclass of it declaring a fused trainer where it has none."""
    if getattr(kind, "fused_trainer", None) is not None:
        return kind
    draws = _training_draws if kind is SparseTokenEncoder else None
    return type(f"Fused{kind.__name__}", (kind,),
                {"fused_trainer": StackedTrainer(forward_kwargs=draws)})


def _grid(size):
    """``size`` (rate, seed) pairs: the rates of the grid, then more seeds."""
    return [(RATES[i % len(RATES)], i // len(RATES)) for i in range(size)]


def _fits(family, size, n_samples, epochs, device, fused=False):
    """The group's estimators and their data, fresh (a fit changes its estimator)."""
    kind, params, seq_len, batch = FAMILIES[family]
    kind = _fusing(kind) if fused else kind
    nets = [kind(lr=lr, max_epochs=epochs, batch_size=batch, random_state=seed,
                 device=device, **params) for lr, seed in _grid(size)]
    data = [(SparseSelectionStream(seq_len, TOKEN_DIM, N_SELECTED, n_samples=n_samples,
                                   random_state=seed, device=device), None)
            for _, seed in _grid(size)]
    return nets, data


def main():
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="9", help="group sizes (default 9)")
    p.add_argument("--families", default=",".join(FAMILIES),
                   help=f"which families (default: all: {', '.join(FAMILIES)})")
    p.add_argument("--samples", type=int, default=None,
                   help="sequences per epoch (default 2048; --quick 512)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default 2; --quick 1)")
    args = p.parse_args()
    repeats = common.setup(args, repeats=5, quick_repeats=3)
    n_samples = args.samples or (512 if args.quick else 2048)
    epochs = args.epochs or (1 if args.quick else 2)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for family in args.families.split(","):
        for size in sizes:
            def lone(family=family, size=size):
                for net, (X, _) in zip(*_fits(family, size, n_samples, epochs, args.device)):
                    net.fit(X)

            def fused(family=family, size=size):
                nets, data = _fits(family, size, n_samples, epochs, args.device, fused=True)
                errors = fit_group(nets, data, trainer="fused")
                if any(errors):  # e.g. a module that does not run under vmap
                    raise RuntimeError(f"{type(errors[0]).__name__}: {errors[0]}"[:120])

            row = {"family": family, "group": size,
                   "declares fused": getattr(FAMILIES[family][0], "fused_trainer",
                                             None) is not None}
            try:
                times = common.compare({"lone": lone, "fused": fused}, repeats=repeats,
                                       device=args.device)
            except RuntimeError as exc:
                rows.append({**row, "lone ms/model (cpu)": "-", "fused speed-up (cpu)": "-",
                             "fused speed-up (wall)": f"fails: {exc}"})
                continue
            row["lone ms/model (cpu)"] = 1e3 * common.median(times, "lone", "cpu") / size
            for clock in ("cpu", "wall"):
                row[f"fused speed-up ({clock})"] = 1 / common.ratio(times, "fused", "lone",
                                                                     clock)
            rows.append(row)
            common.print_table(f"{family}, group of {size}", list(row), [row])
    common.print_table(
        f"Fused groups against lone fits ({args.device}, {torch.get_num_threads()} thread(s), "
        f"{epochs} epoch(s) of {n_samples} sequences, median of {repeats})",
        list(rows[0]), rows)
    common.write_json(args, "bench_group", {"rows": rows})


if __name__ == "__main__":
    main()
