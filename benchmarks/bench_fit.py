"""Estimator fit time against a hand-written PyTorch loop and skorch's default loading.

Each estimator's module is trained four ways, for the same epochs, batch
size, optimiser and learning rate on the same data:

- ``hand loop`` (the baseline): a plain PyTorch loop, data moved to the
  device once, batches gathered with ``index_select`` from a per-epoch
  permutation, no per-batch synchronisation;
- ``estimator``: ``SparseTokenTransformer.fit`` / ``SparseTokenFCN.fit``
  (the package's path: tensors on the device, ``TensorBatches``);
- ``estimator (DataLoader)``: the same estimator with
  ``iterator_train=DataLoader`` (skorch's default iterator, one
  ``__getitem__`` per sample);
- ``skorch defaults``: a plain ``skorch.NeuralNetRegressor`` over the same
  module, with skorch's default dataset and DataLoader.

Times include everything a user waits for: building the module, converting
and moving the data, training. A second table (CPU only) times the estimator
at 1, 2, ... torch threads against 1 thread. A third (CPU only) isolates
skorch's per-batch bookkeeping: one epoch of skorch's own loop
(``run_single_epoch``: ``train_step``, callbacks, history) against one epoch
of the hand loop, on the same fitted module, optimiser and device tensors.

The transformer runs at its defaults (8 positional draws per sequence) and
as the paper's model (1 draw); the encoder and the RNN (beyond the paper) at
theirs. Targets (CPU, batch 256): estimator <= 1.05x
the hand loop for every estimator; the transformer >= 1.5x faster than
skorch's default loading. On a GPU (``--device cuda``, large batch):
estimator throughput >= 0.9x the hand loop's.

    python benchmarks/bench_fit.py --quick
    python benchmarks/bench_fit.py --device cuda --batch-size 4096
"""

import os

import torch
from skorch import NeuralNetRegressor
from torch.utils.data import DataLoader

import common
from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators.architectures import RecurrentNet, TransformerEncoder
from sparse_token_estimators.modules import FullyConnectedNet, SparseTokenAttention

SEQ_LEN, TOKEN_DIM, N_SELECTED = 20, 8, 3
#: training sequences of a timed fit, by (on a GPU, --quick)
FIT_SAMPLES = {(False, False): 20000, (False, True): 8000,
               (True, False): 100000, (True, True): 50000}

#: name -> (estimator class, module class, its parameters, learning rate)
MODELS = {
    "transformer": (SparseTokenTransformer, SparseTokenAttention,
                    {"pe_dim": 64, "n_pe_draws": 8}, 0.02),  # the defaults
    # the paper's model, one positional draw per sequence: an eighth of the
    # positional work per batch, so data loading weighs more
    "transformer, 1 draw": (SparseTokenTransformer, SparseTokenAttention,
                            {"pe_dim": 64, "n_pe_draws": 1}, 0.02),
    "fcn": (SparseTokenFCN, FullyConnectedNet, {"hidden_width": 256}, 0.003),  # the defaults
    # the architectures beyond the paper's two, at their defaults
    "encoder": (SparseTokenEncoder, TransformerEncoder,
                {"d_model": 32, "n_heads": 2, "n_layers": 1, "positional_encoding": "none"}, 0.003),
    "rnn": (SparseTokenRNN, RecurrentNet, {"cell": "gru", "hidden_size": 32, "n_layers": 1},
            0.003),
}


def module_kwargs(model):
    _, module, params, _ = MODELS[model]
    kwargs = {"token_dim": TOKEN_DIM, **params}
    if module is FullyConnectedNet:
        kwargs["seq_len"] = SEQ_LEN
    return kwargs


def hand_loop(model, X, y, *, epochs, batch_size, device, seed=0):
    """Train the module with a plain PyTorch loop: the baseline."""
    _, module_cls, _, lr = MODELS[model]
    torch.manual_seed(seed)
    module = module_cls(**module_kwargs(model)).to(device).train()
    X = torch.as_tensor(X).to(device)
    y = torch.as_tensor(y).to(device)
    optimizer = torch.optim.Adam(module.parameters(), lr=lr)
    criterion = torch.nn.MSELoss()
    generator = torch.Generator(device=device).manual_seed(seed)
    for _ in range(epochs):
        hand_epoch(module, optimizer, criterion, X, y, batch_size=batch_size,
                   generator=generator)
    return module


def hand_epoch(module, optimizer, criterion, X, y, *, batch_size, generator):
    """One epoch of the hand loop over device tensors ``X``, ``y``."""
    forward_kwargs = {"generator": generator} if isinstance(module, SparseTokenAttention) else {}
    order = torch.randperm(len(X), generator=generator, device=X.device)
    for start in range(0, len(X), batch_size):
        index = order[start:start + batch_size]
        X_batch, y_batch = X.index_select(0, index), y.index_select(0, index)
        optimizer.zero_grad()
        loss = criterion(module(X_batch, **forward_kwargs), y_batch)
        loss.backward()
        optimizer.step()


def estimator(model, *, epochs, batch_size, device, **params):
    cls, _, module_params, lr = MODELS[model]
    return cls(**module_params, lr=lr, max_epochs=epochs, batch_size=batch_size,
               device=device, random_state=0, **params)


def skorch_defaults(model, *, epochs, batch_size, device):
    _, module_cls, _, lr = MODELS[model]
    params = {f"module__{k}": v for k, v in module_kwargs(model).items()}
    return NeuralNetRegressor(
        module_cls, **params, optimizer=torch.optim.Adam, lr=lr, max_epochs=epochs,
        batch_size=batch_size, iterator_train__shuffle=True, train_split=None,
        device=device, verbose=0,
    )


CASES = ("hand loop", "estimator", "estimator (DataLoader)", "skorch defaults")


def epoch_cases(model, X, y, *, batch_size, device):
    """One epoch of skorch's loop and of the hand loop over the same objects."""
    est = estimator(model, epochs=1, batch_size=batch_size, device=device).fit(X, y)
    dataset = est.get_dataset(X, y)
    X_t, y_t = dataset.tensors
    generator = torch.Generator(device=device).manual_seed(0)

    def hand_loop_epoch():
        hand_epoch(est.module_, est.optimizer_, est.criterion_, X_t, y_t,
                   batch_size=batch_size, generator=generator)

    def skorch_epoch():
        est.history.new_epoch()
        iterator = est.get_iterator(dataset, training=True)
        est.run_single_epoch(iterator, training=True, prefix="train", step_fn=est.train_step)

    return {"hand loop epoch": hand_loop_epoch, "skorch epoch": skorch_epoch}


def fit_cases(model, X, y, *, epochs, batch_size, device):
    size = {"epochs": epochs, "batch_size": batch_size, "device": device}
    return {
        "hand loop": lambda: hand_loop(model, X, y, **size),
        "estimator": lambda: estimator(model, **size).fit(X, y),
        "estimator (DataLoader)": lambda: estimator(
            model, **size, iterator_train=DataLoader, iterator_valid=DataLoader).fit(X, y),
        "skorch defaults": lambda: skorch_defaults(model, **size).fit(X, y),
    }


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--n-samples", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None,
                   help="default 256 on the CPU, 4096 on a GPU")
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"comma-separated subset of: {', '.join(CASES)} (the hand loop "
                        "always runs)")
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of: {', '.join(MODELS)}")
    p.add_argument("--skip-threads", action="store_true",
                   help="leave out the tables of fit time against torch threads and "
                        "of one epoch against skorch's loop (CPU)")
    args = p.parse_args()
    on_gpu = args.device.startswith("cuda")
    repeats = common.setup(args, repeats=3 if on_gpu else 5, quick_repeats=3)
    if args.n_samples is None:
        args.n_samples = FIT_SAMPLES[on_gpu, args.quick]
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.batch_size = args.batch_size or (4096 if on_gpu else 256)
    cases = {"hand loop", *(c.strip() for c in args.cases.split(","))}
    if not cases <= set(CASES):
        p.error(f"--cases: unknown {sorted(cases - set(CASES))}; choose from {CASES}")
    models = [m.strip() for m in args.models.split(",")]
    if not set(models) <= set(MODELS):
        p.error(f"--models: unknown {sorted(set(models) - set(MODELS))}; choose from "
                f"{', '.join(MODELS)}")
    X, y = make_sparse_selection(args.n_samples, SEQ_LEN, TOKEN_DIM, N_SELECTED,
                                 random_state=0)
    size = {"epochs": args.epochs, "batch_size": args.batch_size, "device": args.device}

    rows = []
    for model in models:
        chosen = {name: fit for name, fit in fit_cases(model, X, y, **size).items()
                  if name in cases}
        times = common.compare(chosen, repeats=repeats, device=args.device)
        for case in times:
            wall = common.median(times, case)
            rows.append({
                "model": model, "case": case, "seconds": wall,
                "samples/s": args.n_samples * args.epochs / wall,
                "time vs hand loop": common.ratio(times, case, "hand loop"),
                "throughput vs hand loop": 1 / common.ratio(times, case, "hand loop"),
                "CPU time vs hand loop": common.ratio(times, case, "hand loop", "cpu"),
                "times": times[case],
            })
    columns = ["model", "case", "seconds", "samples/s", "time vs hand loop"]
    columns.append("throughput vs hand loop" if on_gpu else "CPU time vs hand loop")
    common.print_table(
        f"Fit time, {args.n_samples} samples, T={SEQ_LEN}, d={TOKEN_DIM}, "
        f"{args.epochs} epochs, batch {args.batch_size}, {args.device}, "
        f"{args.threads} thread(s); median of {repeats}", columns, rows)

    thread_rows = []
    if not on_gpu and not args.skip_threads:
        counts = list(range(1, min(os.cpu_count(), 4) + 1))
        for model in [m for m in ("transformer", "fcn") if m in models]:
            cases = {}
            for n in counts:
                def fit(n=n, model=model):
                    torch.set_num_threads(n)
                    estimator(model, **size).fit(X, y)
                cases[f"{n} thread(s)"] = fit
            times = common.compare(cases, repeats=repeats, device=args.device)
            torch.set_num_threads(args.threads)
            for case in times:
                thread_rows.append({
                    "model": model, "torch threads": case,
                    "seconds": common.median(times, case),
                    "time vs 1 thread": common.ratio(times, case, "1 thread(s)"),
                    "times": times[case],
                })
        if thread_rows:  # only the transformer and the FCN are timed against threads
            common.print_table(
                f"Estimator fit time against torch threads ({os.cpu_count()} cores)",
                ["model", "torch threads", "seconds", "time vs 1 thread"], thread_rows)

    epoch_rows = []
    if not on_gpu and not args.skip_threads:
        for model in models:
            cases = epoch_cases(model, X, y, batch_size=args.batch_size, device=args.device)
            times = common.compare(cases, repeats=4 * repeats, device=args.device)
            for case in times:
                epoch_rows.append({
                    "model": model, "case": case, "ms": 1e3 * common.median(times, case),
                    "time vs hand loop epoch": common.ratio(times, case, "hand loop epoch"),
                    "times": times[case],
                })
        common.print_table(
            f"One training epoch, skorch's loop against the hand loop (same module, "
            f"optimiser and tensors); median of {4 * repeats}",
            ["model", "case", "ms", "time vs hand loop epoch"], epoch_rows)

    common.write_json(args, f"fit_{args.device.split(':')[0]}_batch{args.batch_size}",
                      {"fit": rows, "threads": thread_rows, "epoch": epoch_rows})


if __name__ == "__main__":
    main()
