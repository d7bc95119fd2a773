"""The architectures in the query layout (and the indicator layout beside it): held-out R^2.

One seeded task (T = 16, d = 8, q = 3 by default), a few thousand training
sequences, one fixed recipe per model (no search): the paper's model
(z = sum_j p_{i_j}), the encoder without a positional encoding and with a
learned, sinusoidal and rotary one, a GRU and the FCN. In the query layout,
predicting the mean of all tokens scores q / T, and a model symmetric in the
token rows (the encoder without positions) cannot do better::

    python benchmarks/bench_query_layout.py --layouts query indicator

``--stream`` trains on fresh sequences every epoch (a ``SparseSelectionStream``
of ``--n-train`` per epoch) instead of one fixed training set, and
``--models`` picks models by the start of their names (e.g. ``--models GRU FCN``).
"""

import argparse
import time

import torch

from sparse_token_estimators import (
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    make_sparse_selection,
)


def models(seq_len, epochs, layout):
    common = dict(layout=layout, max_epochs=epochs, batch_size=128, random_state=0,
                  device="cpu")
    encoder = dict(d_model=32, n_heads=2, n_layers=1, lr=0.003, max_seq_len=seq_len, **common)
    return {
        "paper's model (stochastic, pe_dim 64)": SparseTokenTransformer(pe_dim=64, **common),
        "encoder, no positional encoding": SparseTokenEncoder(**encoder),
        "encoder, learned": SparseTokenEncoder(positional_encoding="learned", **encoder),
        "encoder, sinusoidal": SparseTokenEncoder(positional_encoding="sinusoidal", **encoder),
        "encoder, RoPE": SparseTokenEncoder(positional_encoding="rope", **encoder),
        "GRU (hidden 64)": SparseTokenRNN(hidden_size=64, lr=0.003, **common),
        "FCN (width 256)": SparseTokenFCN(hidden_width=256, lr=0.003, **common),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--token-dim", type=int, default=8)
    p.add_argument("--n-selected", type=int, default=3)
    p.add_argument("--n-train", type=int, default=4000)
    p.add_argument("--n-val", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--layouts", nargs="+", default=["query"], choices=["query", "indicator"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--stream", action="store_true")
    p.add_argument("--models", nargs="*", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    T, d, q = args.seq_len, args.token_dim, args.n_selected
    print(f"T = {T}, d = {d}, q = {q}: {args.n_train} training sequences (seed 0), "
          f"{args.n_val} held out (seed 1), {args.epochs} epochs of batch 128"
          f"{' (fresh sequences every epoch)' if args.stream else ''}; "
          f"q / T = {q / T:.4f}")
    rows = {}
    for layout in args.layouts:
        train = make_sparse_selection(args.n_train, T, d, q, layout=layout, random_state=0)
        if args.stream:
            train = (SparseSelectionStream(T, d, q, n_samples=args.n_train, random_state=0,
                                           device="cpu", layout=layout), None)
        val = make_sparse_selection(args.n_val, T, d, q, layout=layout, random_state=1)
        for name, est in models(T, args.epochs, layout).items():
            if args.models and not name.startswith(tuple(args.models)):
                continue
            start = time.perf_counter()
            est.fit(*train)
            rows.setdefault(name, {})[layout] = (est.score(*val), time.perf_counter() - start)
            print(f"  {layout:9s} {name}: R^2 {rows[name][layout][0]:.4f} "
                  f"({rows[name][layout][1]:.0f} s)", flush=True)
    print("\n| model | " + " | ".join(f"val R^2, {layout} layout" for layout in args.layouts)
          + " |")
    print("|---|" + "---|" * len(args.layouts))
    for name, by_layout in rows.items():
        print(f"| {name} | " + " | ".join(f"{by_layout[layout][0]:.4f}"
                                          for layout in args.layouts) + " |")


if __name__ == "__main__":
    main()
