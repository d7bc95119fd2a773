"""The stochastic positional draws: random sign vectors against normalised Gaussians.

The package draws the positional vectors p_i as random sign vectors scaled by
1/sqrt(pe_dim) (``positional.random_unit_vectors``); the usual alternative is
Gaussian vectors normalised to unit length. Both are unit-norm and
near-orthogonal. This script times one training batch of draws of each
(n_pe_draws * batch, T, pe_dim), and with ``--quality`` fits the transformer
side by side with each kind of draw (the Gaussian one patched in; n_pe_draws=4,
15 epochs, 20000 samples, T=20, d=8, q=3, pe_dim from ``--pe-dims``) and reports
held-out R^2 at the training length T and at 2T and 4T, the alignment of W
with the identity, and the fit's time.

    python benchmarks/bench_positional.py --quick
    python benchmarks/bench_positional.py --quality        # about 10 min on 1 core
    python benchmarks/bench_positional.py --quality --pe-dims 16,32
"""

from contextlib import contextmanager

import torch

import common
from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection, positional
from sparse_token_estimators.theory import identity_alignment


def gaussian_unit_vectors(*shape, generator=None, device=None):
    """Gaussian vectors normalised to unit length: the alternative draw."""
    p = torch.randn(*shape, generator=generator, device=device)
    return p / p.norm(dim=-1, keepdim=True)


DRAWS = {"sign vectors": positional.random_unit_vectors, "Gaussian": gaussian_unit_vectors}


class GaussianPositionalEncoding(positional.StochasticPositionalEncoding):
    """The stochastic encoding with normalised Gaussian vectors: the alternative."""

    def draw(self, shape, *, generator=None, device=None):
        return torch.randn(*shape, self.pe_dim, generator=generator, device=device)

    def forward(self, shape, noise):
        return noise / noise.norm(dim=-1, keepdim=True)  # (K, B, T, d_p)


ENCODINGS = {"sign vectors": positional.StochasticPositionalEncoding,
             "Gaussian": GaussianPositionalEncoding}


@contextmanager
def drawing(kind):
    """Make the modules built inside draw their stochastic vectors as ``kind``."""
    saved = positional.ENCODINGS["stochastic"]
    positional.ENCODINGS["stochastic"] = ENCODINGS[kind]
    try:
        yield
    finally:
        positional.ENCODINGS["stochastic"] = saved


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--quality", action="store_true",
                   help="also fit the transformer with each kind of draw")
    p.add_argument("--seeds", type=int, default=3, help="fits per kind with --quality")
    p.add_argument("--pe-dims", default="128",
                   help="comma-separated pe_dim values for --quality (default 128)")
    args = p.parse_args()
    repeats = common.setup(args, repeats=20, quick_repeats=10)

    rows = []
    for pe_dim in (64, 128):
        shape = (4 * 256, 20, pe_dim)  # n_pe_draws * batch, T, d_p
        generator = torch.Generator(device=args.device).manual_seed(0)
        cases = {kind: (lambda draw=draw, shape=shape, generator=generator:
                        draw(*shape, generator=generator, device=args.device))
                 for kind, draw in DRAWS.items()}
        times = common.compare(cases, repeats=repeats, device=args.device)
        for kind in times:
            rows.append({
                "shape": "x".join(map(str, shape)), "draw": kind,
                "ms": 1000 * common.median(times, kind),
                "time vs Gaussian": common.ratio(times, kind, "Gaussian"),
                "times": times[kind],
            })
    common.print_table(f"One training batch of positional draws, {args.device}; "
                       f"median of {repeats}", ["shape", "draw", "ms", "time vs Gaussian"],
                       rows)

    quality = []
    if args.quality:
        X, y = make_sparse_selection(20000, 20, 8, 3, random_state=0)
        tests = {T: make_sparse_selection(2000, T, 8, 3, random_state=100 + T)
                 for T in (20, 40, 80)}
        for pe_dim in map(int, args.pe_dims.split(",")):
            for seed in range(args.seeds):
                for kind in DRAWS:
                    est = SparseTokenTransformer(pe_dim=pe_dim, n_pe_draws=4, max_epochs=15,
                                                 device=args.device, random_state=seed)
                    with drawing(kind):
                        wall, cpu = common.timed(lambda est=est: est.fit(X, y), args.device)
                    assert isinstance(est.module_.positions, ENCODINGS[kind])
                    scores = {T: est.score(*tests[T]) for T in tests}
                    quality.append({
                        "pe_dim": pe_dim, "seed": seed, "draw": kind,
                        "R^2 at T=20": scores[20], "R^2 at 2T": scores[40],
                        "R^2 at 4T": scores[80],
                        "alignment": identity_alignment(est.module_.W),
                        "fit seconds": wall, "fit CPU seconds": cpu,
                    })
            for kind in DRAWS:
                mine = [r for r in quality if r["draw"] == kind and r["pe_dim"] == pe_dim
                        and r["seed"] != "mean"]
                quality.append({"pe_dim": pe_dim, "seed": "mean", "draw": kind, **{
                    k: sum(r[k] for r in mine) / len(mine) for k in mine[0]
                    if k not in ("pe_dim", "seed", "draw")}})
        common.print_table(
            "Transformer, n_pe_draws=4, 15 epochs on make_sparse_selection(20000, 20, 8, 3); "
            "R^2 on 2000 held-out samples at T, 2T, 4T", list(quality[0]), quality)
    common.write_json(args, f"positional_{args.device.split(':')[0]}",
                      {"draws": rows, "quality": quality})


if __name__ == "__main__":
    main()
