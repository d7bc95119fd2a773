"""Memory and time of ``predict`` at long sequence lengths.

At prediction time every sequence gets n_pe_draws positional draws of its
own (derived from the model's seed and the sequence). Holding them all, the
"broadcast" formula, needs (K, B, T, d_p) floats: 10 GiB at the defaults
(K = 8 draws, pe_dim 64, batch 256) and T = 20000. The module makes them
by blocks of sequences and draws of at most 2^22 coordinates, in
O(2^22 + B T d) memory. This
script predicts one default batch (256 sequences, token_dim 8, 3 selected
tokens) of length T with each implementation, every case in a fresh
subprocess, and reports the subprocess's peak resident set
(``getrusage(RUSAGE_SELF).ru_maxrss`` at its end), the resident set before
``predict`` (the interpreter, torch and the data), and the wall time of
``predict``, and that of the batch's keys alone (the hash of every
sequence the draws are made from). "broadcast" is the former formula patched into the same
package, the baseline of the same run. A case whose broadcast would need
more than ``--max-gib`` is not run. The estimator is at its defaults,
initialised without data, with a random W (its values do not change the
cost).

    python benchmarks/bench_predict_memory.py --quick            # T = 1000, 5000
    python benchmarks/bench_predict_memory.py                    # T = 1000, 20000, 50000
    python benchmarks/bench_predict_memory.py --lengths 20000 --only package --pe-dim 256

``PYTHONPATH=/path/to/an/older/checkout`` measures that checkout's module as
"package" (the broadcast patch then replaces a method it may not have: use
``--only package``).
"""

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import common

BATCH, TOKEN_DIM, N_SELECTED = 256, 8, 3
IMPLEMENTATIONS = ("broadcast", "package")


def _broadcast_attend(self, keys, indicator):
    # Every sequence's draws at once, (K, B, T, d_p) in memory.
    P = self.positions.keyed_vectors(keys, range(self.n_pe_draws), indicator.shape[1])
    z = torch.matmul(indicator.unsqueeze(1), P)  # (K, B, 1, d_p)
    scores = (P @ (z @ self.W.T).transpose(-1, -2)).squeeze(-1)  # (K, B, T)
    return torch.softmax(scores, dim=-1).mean(0)  # (B, T)


def child(implementation, seq_len, threads, pe_dim):
    """Predict one batch of ``seq_len``; print a JSON line with the figures."""
    global torch
    import torch

    from sparse_token_estimators import SparseTokenTransformer, modules

    torch.set_num_threads(threads)
    if implementation == "broadcast":
        modules.SparseTokenAttention._attend_keyed = _broadcast_attend
    est = SparseTokenTransformer(token_dim=TOKEN_DIM, pe_dim=pe_dim, device="cpu",
                                 random_state=0)
    est.initialize()
    with torch.no_grad():
        est.module_.W.normal_(generator=torch.Generator().manual_seed(0))
    # The data drawn in float32 directly: make_sparse_selection's float64
    # intermediates would set the peak at the largest lengths.
    g = torch.Generator().manual_seed(0)
    X = torch.zeros(BATCH, seq_len, TOKEN_DIM + 1)
    X[..., :TOKEN_DIM] = torch.randn(BATCH, seq_len, TOKEN_DIM, generator=g)
    selected = torch.rand(BATCH, seq_len, generator=g).argsort(dim=1)[:, :N_SELECTED]
    X[..., TOKEN_DIM].scatter_(1, selected, 1.0)
    X = X.numpy()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    start = time.perf_counter()
    prediction = est.predict(X)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    # The eval-mode keys (a hash of every sequence): their share of predict
    start = time.perf_counter()
    est.module_.eval().draw_noise(torch.as_tensor(X))
    draw_seconds = time.perf_counter() - start
    print(json.dumps({"peak_rss_gib": peak, "rss_before_gib": before, "seconds": seconds,
                      "draw_seconds": draw_seconds,
                      "checksum": float(abs(prediction).sum())}))


def run_case(implementation, seq_len, threads, pe_dim):
    done = subprocess.run(
        [sys.executable, __file__, "--child", implementation, str(seq_len),
         "--threads", str(threads), "--pe-dim", str(pe_dim)], capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--lengths", default=None,
                   help="comma-separated T (default 1000,20000,50000; --quick 1000,5000)")
    p.add_argument("--only", choices=IMPLEMENTATIONS, default=None)
    p.add_argument("--pe-dim", type=int, default=64, help="pe_dim (default 64)")
    p.add_argument("--max-gib", type=float, default=12.0,
                   help="skip a broadcast case whose draws alone need more (default 12)")
    p.add_argument("--child", nargs=2, metavar=("IMPLEMENTATION", "T"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.threads, args.pe_dim)
        return
    default = "1000,5000" if args.quick else "1000,20000,50000"
    lengths = [int(t) for t in (args.lengths or default).split(",")]
    names = [args.only] if args.only else list(IMPLEMENTATIONS)
    rows = []
    for name in names:
        for seq_len in lengths:
            broadcast_gib = 8 * BATCH * seq_len * args.pe_dim * 4 / 2**30  # (K, B, T, d_p)
            if name == "broadcast" and broadcast_gib > args.max_gib:
                figures = {"error": f"not run: the broadcast draws alone need "
                                    f"{broadcast_gib:.1f} GiB > --max-gib {args.max_gib}"}
            else:
                figures = run_case(name, seq_len, args.threads, args.pe_dim)
            rows.append({"implementation": name, "seq_len": seq_len, **figures})
            print(rows[-1], file=sys.stderr)
    print(f"\npredict of one batch of {BATCH} sequences, SparseTokenTransformer defaults "
          f"(pe_dim {args.pe_dim}, n_pe_draws 8, token_dim {TOKEN_DIM}), CPU, "
          f"{args.threads} thread(s)\n")
    print("| implementation | T | peak RSS (GiB) | RSS before predict (GiB) | predict (s) "
          "| the batch's keys (s) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        if "error" in row:
            print(f"| {row['implementation']} | {row['seq_len']} | {row['error']} | | | |")
            continue
        print(f"| {row['implementation']} | {row['seq_len']} | {row['peak_rss_gib']:.2f} | "
              f"{row['rss_before_gib']:.2f} | {row['seconds']:.2f} | {row['draw_seconds']:.3f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "bench_predict_memory.json"
    path.write_text(json.dumps({"rows": rows, "threads": args.threads}, indent=1))
    print(f"\nwritten: {path}")


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
