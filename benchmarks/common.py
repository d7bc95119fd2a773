"""What the benchmark scripts share: arguments, side-by-side timing, tables, JSON.

Every figure a benchmark reports is a ratio of two timings taken in the same
run: the cases of one comparison run in turn, in a rotating order, ``repeats``
times, and each ratio is the median over the repeats of the per-repeat ratio.
Wall-clock time and the process's CPU time are both recorded; on a busy
machine the CPU-time ratio is the steadier of the two (it is meaningless on a
GPU and for parallel runs, where the wall clock is what counts).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"


def parser(description):
    """An ``ArgumentParser`` with the options every benchmark takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few repeats: about a minute")
    p.add_argument("--repeats", type=int, default=None,
                   help="timings per case; the median is reported")
    p.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (default: cpu)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: these models are small)")
    p.add_argument("--out", type=Path, default=RESULTS,
                   help=f"folder for the JSON results (default {RESULTS})")
    return p


def setup(args, *, repeats, quick_repeats):
    """Apply the common options; return the resolved number of repeats."""
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: no CUDA GPU is available; use --device cpu.")
    torch.set_num_threads(args.threads)
    if args.repeats is None:
        args.repeats = quick_repeats if args.quick else repeats
    return args.repeats


def synchronize(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device="cpu"):
    """``(wall seconds, CPU seconds)`` of one call of ``fn``."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def compare(cases, *, repeats, device="cpu", warmup=True):
    """Time every case of ``{name: fn}`` ``repeats`` times, side by side.

    The order rotates between repeats, so that drift in the machine's load
    or clock falls on every case alike. Returns ``{name: {"wall": [...],
    "cpu": [...]}}``.
    """
    names = list(cases)
    if warmup:
        for name in names:
            cases[name]()
    times = {name: {"wall": [], "cpu": []} for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            wall, cpu = timed(cases[name], device)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    return times


def ratio(times, case, baseline, clock="wall"):
    """Median over the repeats of ``time(case) / time(baseline)``."""
    return statistics.median(
        a / b for a, b in zip(times[case][clock], times[baseline][clock])
    )


def median(times, case, clock="wall"):
    return statistics.median(times[case][clock])


def print_table(title, columns, rows):
    """Print ``rows`` (dicts) under ``title`` as an aligned Markdown table."""
    cells = [[_format(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}\n")
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |")
    sys.stdout.flush()


def _format(value):
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def write_json(args, name, results):
    """Write ``results`` with the run's settings to ``args.out / name.json``."""
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    meta = {
        "settings": settings,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "device_name": (torch.cuda.get_device_name() if args.device.startswith("cuda")
                        else platform.processor() or platform.machine()),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    path.write_text(json.dumps({"meta": meta, **results}, indent=2))
    print(f"\nwrote {path}")
    return path
