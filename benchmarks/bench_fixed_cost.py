"""A fit's fixed cost apart from its per-step cost, per estimator, against a hand loop.

For each estimator (the transformer as the paper's model, one positional
draw; the FCN; the encoder; the RNN; the state-space model) and a
hand-written PyTorch loop over the same module (built, seeded, data moved to
tensors once, a permutation per epoch, ``index_select`` batches, the same
optimiser), four things are timed side by side, in a rotating order:

- ``build``: ``initialize()`` with the sizes given (a fit of zero epochs:
  ``max_epochs=0`` is refused) against building the module and optimiser;
- ``1 step``: a fit of one batch (one epoch of ``batch_size`` sequences);
- ``K steps``: a fit of ``K`` batches (one epoch of ``K * batch_size``).

The fixed cost of a call is what a fit of one batch costs beyond the hand
loop's (ms); the per-step cost is ``(K steps - 1 step) / (K - 1)`` for each,
and its ratio fit / hand loop is skorch's per-batch bookkeeping (``notify``,
history, callbacks) with the data's checks and conversion, which grow with
the sequences.

The headline table comes first: the FCN and the paper's model at 20,000
sequences, T = 20, d = 8, width 256 (pe_dim 64), 3 epochs, batch 256, SGD,
fit / hand loop, median of the per-repeat ratios of 3 interleaved repeats
(targets 1.10 and 1.05). One command prints both tables, at 2 torch threads
and 3 repeats unless told otherwise (run from the repository root, with
``PYTHONPATH=.`` when the installed package is another checkout's):

    python benchmarks/bench_fixed_cost.py
    python benchmarks/bench_fixed_cost.py --headline     # the headline table alone
    python benchmarks/bench_fixed_cost.py --fixed --quick  # the fixed-cost table alone
"""

import functools

import numpy as np
import torch
from sklearn.utils import check_random_state

import common
from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    make_sparse_selection,
)

SEQ_LEN, TOKEN_DIM, N_SELECTED, BATCH = 20, 8, 3, 256

#: name -> (estimator class, its parameters); the module is the estimator's default
MODELS = {
    "paper's model": (SparseTokenTransformer,
                                            {"pe_dim": 64, "n_pe_draws": 1, "lr": 0.02}),
    "fcn": (SparseTokenFCN, {"hidden_width": 256, "lr": 0.003}),
    "encoder": (SparseTokenEncoder, {"d_model": 32, "n_heads": 2, "n_layers": 1,
                                     "positional_encoding": "none", "lr": 0.003}),
    "rnn": (SparseTokenRNN, {"cell": "gru", "hidden_size": 32, "n_layers": 1, "lr": 0.003}),
    "ssm": (SparseTokenSSM, {"d_model": 32, "d_state": 16, "n_layers": 1, "lr": 0.003}),
}
OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def estimator(model, epochs, optimizer, **params):
    cls, own = MODELS[model]
    return cls(**own, max_epochs=epochs, batch_size=BATCH, optimizer=optimizer,
               random_state=0, device="cpu", **params)


def fit(model, epochs, optimizer, X, y):
    return estimator(model, epochs, optimizer).fit(X, y)


def hand_build(model, optimizer):
    """The module (seeded as the estimator seeds it), its optimiser and generator."""
    cls, own = MODELS[model]
    est = cls(**own, token_dim=TOKEN_DIM, random_state=0, device="cpu")
    seeds = check_random_state(0).randint(np.iinfo(np.int32).max, size=3).tolist()
    kwargs = {name: getattr(est, name) for name in est._module_params}
    kwargs["token_dim"] = TOKEN_DIM
    if cls is SparseTokenFCN:
        kwargs["seq_len"] = SEQ_LEN
    if cls in (SparseTokenTransformer, SparseTokenEncoder):
        kwargs["eval_seed"] = seeds[2]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds[0])
        module = est.module(**kwargs)
    return (module, optimizer(module.parameters(), lr=own["lr"]),
            torch.Generator().manual_seed(seeds[1]))


def hand_loop(model, X, y, epochs, optimizer):
    """The same training without skorch: build, tensors once, shuffled batches."""
    module, optim, generator = hand_build(model, optimizer)
    draws = hasattr(module, "draw_noise")
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    criterion = torch.nn.MSELoss()
    module.train()
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), BATCH):
            index = order[start:start + BATCH]
            X_batch, y_batch = X.index_select(0, index), y.index_select(0, index)
            optim.zero_grad()
            kwargs = {"noise": module.draw_noise(X_batch, generator=generator)} if draws else {}
            loss = criterion(module(X_batch, **kwargs), y_batch)
            loss.backward()
            optim.step()
    return module


def step_cases(model, optimizer, X, y):
    """Build alone, a fit of one batch and a fit of every batch, for fit and hand loop."""
    sizes = {"token_dim": TOKEN_DIM, **({"seq_len": SEQ_LEN} if model == "fcn" else {})}
    one = (X[:BATCH], y[:BATCH])
    return {
        "fit build": lambda: estimator(model, 1, optimizer, **sizes).initialize(),
        "hand build": lambda: hand_build(model, optimizer),
        "fit 1": lambda: estimator(model, 1, optimizer).fit(*one),
        "hand 1": lambda: hand_loop(model, *one, 1, optimizer),
        "fit K": lambda: estimator(model, 1, optimizer).fit(X, y),
        "hand K": lambda: hand_loop(model, X, y, 1, optimizer),
    }


def fixed_cost_rows(models, steps, optimizer, repeats, clock):
    X, y = make_sparse_selection(steps * BATCH, SEQ_LEN, TOKEN_DIM, N_SELECTED,
                                 random_state=0)
    rows = []
    for model in models:
        cases = step_cases(model, optimizer, X, y)
        times = common.compare(cases, repeats=repeats)
        ms = {case: 1000 * common.median(times, case, clock) for case in cases}
        step_fit = (ms["fit K"] - ms["fit 1"]) / (steps - 1)
        step_hand = (ms["hand K"] - ms["hand 1"]) / (steps - 1)
        rows.append({
            "model": model,
            "build ms (fit / hand)": f"{ms['fit build']:.2f} / {ms['hand build']:.2f}",
            "1-step fit ms (fit / hand)": f"{ms['fit 1']:.2f} / {ms['hand 1']:.2f}",
            "fixed cost ms": ms["fit 1"] - ms["hand 1"],
            "per step ms (fit / hand)": f"{step_fit:.2f} / {step_hand:.2f}",
            "per step ratio": step_fit / step_hand if step_hand > 0 else float("nan"),
            f"{steps}-step fit / hand": common.ratio(times, "fit K", "hand K", clock),
            "ms": ms,
        })
    return rows


def headline_rows(optimizer, repeats, n_samples=20000, epochs=3):
    X, y = make_sparse_selection(n_samples, SEQ_LEN, TOKEN_DIM, N_SELECTED, random_state=0)
    rows = []
    for model, target in (("fcn", 1.10), ("paper's model", 1.05)):
        times = common.compare({
            "fit": functools.partial(fit, model, epochs, optimizer, X, y),
            "hand loop": functools.partial(hand_loop, model, X, y, epochs, optimizer),
        }, repeats=repeats)
        rows.append({"model": model, "fit s": common.median(times, "fit"),
                     "hand loop s": common.median(times, "hand loop"),
                     "fit / hand loop (wall)": common.ratio(times, "fit", "hand loop"),
                     "fit / hand loop (cpu)": common.ratio(times, "fit", "hand loop", "cpu"),
                     "target": target})
    return rows


def main():
    p = common.parser(__doc__.splitlines()[0])
    p.set_defaults(threads=2)  # the headline's: 2 torch threads
    only = p.add_mutually_exclusive_group()
    only.add_argument("--headline", action="store_true",
                      help="only the FCN and the paper's model at 20,000 sequences, 3 epochs")
    only.add_argument("--fixed", action="store_true",
                      help="only the fixed-cost table of every estimator")
    p.add_argument("--steps", type=int, default=None, help="K, the batches of the long fit")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="the clock of the fixed-cost table (default cpu: the process's CPU "
                        "time, steadier than the wall clock on a shared machine)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of: {', '.join(MODELS)}")
    args = p.parse_args()
    repeats = common.setup(args, repeats=3, quick_repeats=3)
    optimizer = OPTIMIZERS[args.optimizer]
    models = [m.strip() for m in args.models.split(",")]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    if not args.fixed:
        rows = headline_rows(optimizer, repeats)
        common.print_table(f"fit / hand loop, 20,000 sequences, T={SEQ_LEN}, d={TOKEN_DIM}, "
                           f"3 epochs, batch {BATCH}, {args.optimizer}, {args.threads} "
                           f"thread(s), median of {repeats} interleaved repeats",
                           list(rows[0]), rows)
        common.write_json(args, "bench_fixed_cost_headline", {"rows": rows})
        if args.headline:
            return
    args.steps = args.steps or (10 if args.quick else 20)
    rows = fixed_cost_rows(models, args.steps, optimizer, repeats, args.clock)
    columns = [c for c in rows[0] if c != "ms"]
    common.print_table(f"A fit's fixed and per-step cost against a hand loop (T={SEQ_LEN}, "
                       f"d={TOKEN_DIM}, batch {BATCH}, {args.optimizer}, {args.threads} "
                       f"thread(s), {args.clock} time, median of {repeats})", columns, rows)
    common.write_json(args, "bench_fixed_cost", {"rows": rows})


if __name__ == "__main__":
    main()
