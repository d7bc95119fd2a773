"""``SparseSelectionStream`` against the array path: generation and fits.

Two comparisons, each side by side in one run (``common.compare``):

1. **Generation**: one epoch of ``n`` samples drawn by the stream on the
   device, batch by batch, as a fit draws them (``stream.batches(batch_size,
   generator=...)`` with a torch generator on the device), against the array
   path a fit takes: ``make_sparse_selection(n, ...)`` plus the estimators'
   ``get_dataset`` (float32 tensors, moved to the device). The baseline is the
   array path; the ratio is throughput (sequences per second) against it.
   ``make_sparse_selection`` alone (the host draw, no copy) is a third row.
   At (T, d, q) = (20, 8, 3), a longer T (80, 8, 3), and q = T / 2
   (20, 8, 10), where the subset draw (Floyd's, min(q, T - q) draws per
   sequence) does the most work.
2. **Fit**: ``est.fit(SparseSelectionStream(..., n_samples=n))`` against
   ``est.fit(X, y)`` on ``n`` sequences from ``make_sparse_selection`` (the
   baseline: generation excluded), and against the same with the generation
   included; same epochs, batch size and learning rate, for the transformer
   as the paper's model (``n_pe_draws=1``), at its defaults (the
   ``n_pe_draws=8`` ensemble) and the FCN (``hidden_width=256``), all as in
   ``bench_fit.py``. A fourth row draws the same batches as the stream fit
   and does nothing with them: its time over the stream fit's is the share of
   a training step that generation takes. (The array fits train on the same
   ``n`` sequences every epoch, the stream fit on fresh ones: it draws
   ``n`` x epochs sequences, the array path ``n`` once.)

Target: generation at most a small part of a training step (drawing the
batches <= 0.1 of the stream fit's time, for every model).

    python benchmarks/bench_stream.py --quick
    python benchmarks/bench_stream.py --device cuda
    python benchmarks/bench_stream.py --profile     # and where the draws spend their time
"""

import torch

import bench_fit
import common
from sparse_token_estimators import SparseSelectionStream, SparseTokenFCN, make_sparse_selection

#: (seq_len, token_dim, n_selected) of the generation table; the fits use the first
SHAPES = [(20, 8, 3), (80, 8, 3), (20, 8, 10)]

#: bench_fit's models; the labels say which transformer is the paper's
MODELS = {
    "transformer, n_pe_draws=1 (paper)": "transformer, 1 draw",
    "transformer, n_pe_draws=8 (default)": "transformer",
    "fcn, hidden_width=256 (default)": "fcn",
}


def draw_epochs(stream, batch_size, generator, epochs=1):
    """Draw ``epochs`` epochs of the stream's batches, as a fit does, and drop them."""
    for _ in range(epochs):
        for _batch in stream.batches(batch_size, generator=generator):
            pass


def generation_cases(shape, n, batch_sizes, device):
    seq_len, token_dim, n_selected = shape
    stream = SparseSelectionStream(seq_len, token_dim, n_selected, n_samples=n,
                                   random_state=0, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    est = SparseTokenFCN(device=device)  # only its get_dataset: the fit's conversion

    def arrays():
        X, y = make_sparse_selection(n, seq_len, token_dim, n_selected, random_state=0)
        est.get_dataset(X, y)

    cases = {
        "make_sparse_selection + get_dataset": arrays,
        "make_sparse_selection alone": lambda: make_sparse_selection(
            n, seq_len, token_dim, n_selected, random_state=0),
    }
    for b in batch_sizes:
        cases[f"stream, batch {b}"] = lambda b=b: draw_epochs(stream, b, generator)
    return cases


def fit_cases(model, n, *, epochs, batch_size, device):
    seq_len, token_dim, n_selected = SHAPES[0]
    task = (n, seq_len, token_dim, n_selected)
    X, y = make_sparse_selection(*task, random_state=0)
    size = {"epochs": epochs, "batch_size": batch_size, "device": device}

    def population():
        return SparseSelectionStream(seq_len, token_dim, n_selected, n_samples=n,
                                     random_state=0, device=device)

    # A generator on the device, as the fit's (which also feeds the
    # transformer's positional draws, so the numbers differ; the work is the same).
    generator = torch.Generator(device=device).manual_seed(0)

    def draws_alone():
        draw_epochs(population(), batch_size, generator, epochs)

    return {
        "arrays, fit only": lambda: bench_fit.estimator(model, **size).fit(X, y),
        "arrays, generation + fit": lambda: bench_fit.estimator(model, **size).fit(
            *make_sparse_selection(*task, random_state=0)),
        "stream fit": lambda: bench_fit.estimator(model, **size).fit(population()),
        "stream draws alone": draws_alone,
    }


def profile(shape, n, batch_size, device):
    """Print where one epoch of the stream's draws spends its time (torch.profiler)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    stream = SparseSelectionStream(*shape, n_samples=n, random_state=0, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    draw_epochs(stream, batch_size, generator)  # warm up
    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with torch_profile(activities=activities) as prof:
        draw_epochs(stream, batch_size, generator)
        common.synchronize(device)
    # By host time: on a GPU, small batches are bound by the kernel launches
    # (the device columns are in the table too).
    print(f"\nOne epoch of stream draws, T, d, q = {shape}, {n} samples, batch "
          f"{batch_size}, {device}\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


def cpu_columns(on_gpu, columns):
    """The CPU-time columns, on the CPU only (on a GPU the wall clock is what counts)."""
    return [] if on_gpu else columns


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--n-samples", type=int, default=None,
                   help="samples per epoch of the generation table")
    p.add_argument("--fit-samples", type=int, default=None,
                   help="sequences per epoch of the fits")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None,
                   help="the fits' batch size (default 256 on the CPU, 4096 on a GPU)")
    p.add_argument("--skip-fit", action="store_true", help="the generation table only")
    p.add_argument("--profile", action="store_true",
                   help="also print torch.profiler's table of one epoch of draws "
                        "(T=20 and T=80, at the fits' batch size)")
    args = p.parse_args()
    on_gpu = args.device.startswith("cuda")
    repeats = common.setup(args, repeats=3 if on_gpu else 5, quick_repeats=3)
    if args.n_samples is None:
        args.n_samples = {(False, False): 100000, (False, True): 20000,
                          (True, False): 200000, (True, True): 100000}[on_gpu, args.quick]
    if args.fit_samples is None:
        args.fit_samples = bench_fit.FIT_SAMPLES[on_gpu, args.quick]
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.batch_size = args.batch_size or (4096 if on_gpu else 256)
    batch_sizes = sorted({args.batch_size, 65536 if on_gpu else 4096})

    gen_rows = []
    baseline = "make_sparse_selection + get_dataset"
    for shape in SHAPES:
        times = common.compare(generation_cases(shape, args.n_samples, batch_sizes,
                                                args.device),
                               repeats=repeats, device=args.device)
        for case in times:
            wall = common.median(times, case)
            gen_rows.append({
                "T, d, q": ", ".join(map(str, shape)), "case": case, "seconds": wall,
                "samples/s": args.n_samples / wall,
                "throughput vs arrays": 1 / common.ratio(times, case, baseline),
                "CPU-time throughput vs arrays": 1 / common.ratio(times, case, baseline, "cpu"),
                "times": times[case],
            })
    common.print_table(
        f"Generation: one epoch of {args.n_samples} samples on {args.device}, the stream "
        f"against make_sparse_selection + get_dataset (the array path a fit takes); "
        f"{args.threads} thread(s); median of {repeats}",
        ["T, d, q", "case", "seconds", "samples/s", "throughput vs arrays",
         *cpu_columns(on_gpu, ["CPU-time throughput vs arrays"])], gen_rows)

    fit_rows, share_rows = [], []
    if not args.skip_fit:
        size = {"epochs": args.epochs, "batch_size": args.batch_size, "device": args.device}
        for label, model in MODELS.items():
            times = common.compare(fit_cases(model, args.fit_samples, **size),
                                   repeats=repeats, device=args.device)
            for case in times:
                wall = common.median(times, case)
                fit_rows.append({
                    "model": label, "case": case, "seconds": wall,
                    "samples/s": args.fit_samples * args.epochs / wall,
                    "time vs array fit": common.ratio(times, case, "arrays, fit only"),
                    "CPU time vs array fit": common.ratio(times, case, "arrays, fit only",
                                                          "cpu"),
                    "times": times[case],
                })
            share_rows.append({
                "model": label,
                "stream fit / array fit": common.ratio(times, "stream fit",
                                                       "arrays, fit only"),
                "stream fit / array fit, CPU time": common.ratio(
                    times, "stream fit", "arrays, fit only", "cpu"),
                "draws / stream fit": common.ratio(times, "stream draws alone", "stream fit"),
                "draws / stream fit, CPU time": common.ratio(
                    times, "stream draws alone", "stream fit", "cpu"),
            })
        T, d, q = SHAPES[0]
        common.print_table(
            f"Fit: {args.fit_samples} sequences per epoch, T={T}, d={d}, q={q}, "
            f"{args.epochs} epochs, batch {args.batch_size}, {args.device}, "
            f"{args.threads} thread(s); median of {repeats}",
            ["model", "case", "seconds", "samples/s", "time vs array fit",
             *cpu_columns(on_gpu, ["CPU time vs array fit"])], fit_rows)
        common.print_table(
            "Generation's share of a training step (draws alone / stream fit; target "
            "<= 0.1)",
            ["model", "stream fit / array fit",
             *cpu_columns(on_gpu, ["stream fit / array fit, CPU time"]),
             "draws / stream fit", *cpu_columns(on_gpu, ["draws / stream fit, CPU time"])],
            share_rows)

    if args.profile:
        for shape in SHAPES[:2]:
            profile(shape, args.n_samples, args.batch_size, args.device)

    common.write_json(args, f"stream_{args.device.split(':')[0]}",
                      {"generation": gen_rows, "fit": fit_rows, "share": share_rows})


if __name__ == "__main__":
    main()
