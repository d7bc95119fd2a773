"""Where the reproduction's time goes: per experiment, per model and T, per fit.

Runs ``reproduce.run`` at a scale (or reads the ``results.json`` of a run
already made, ``--from``) and prints, from the CPU time each fit records
(one torch thread per fit; on a shared machine the steadier figure; a
learning curve's fits, whose models scikit-learn does not keep, by their
wall time in their worker):

- per experiment: its fits and their CPU seconds (a fit shared between
  experiments counts in each that uses it);
- per model, T and kind of fit (a fixed sample, the population, a
  learning curve's fit): fits, CPU and wall seconds, and the measured CPU time
  over the cost model's estimate (the estimate the progress display's time
  left is weighted by; a ratio, comparable across machines in its spread);
- the run: wall time, total fit CPU time, and their ratio per worker
  (parallel efficiency: 1 when every worker computes all the time);
- first, without running anything, the cost model's estimate for each preset
  (``--scale first``, what ``make run`` runs, beside ``quick`` and
  ``paper``): its planned fits (before the bracketing searches add theirs),
  their estimated fit CPU seconds, and that over the workers (the wall time
  with perfect parallel efficiency). ``--estimate`` prints this table alone.

The fit times are measured inside the run, side by side with everything
else it does; run on an idle machine before comparing seconds.

    python benchmarks/bench_reproduce.py --scale quick --seeds 3 --n-jobs 2
    python benchmarks/bench_reproduce.py --from results/results.json
    python benchmarks/bench_reproduce.py --estimate --n-jobs 2
"""

import json
import time
from pathlib import Path

import torch
from joblib import effective_n_jobs

import common
from sparse_token_estimators import reproduce
from sparse_token_estimators.reproduce._fits import Fit
from sparse_token_estimators.reproduce._report import fit_kind, fit_seconds, timing_rows
from sparse_token_estimators.reproduce._run import planned_fits


def estimated(row, config):
    return Fit(row["model"], row.get("hidden_width") or row.get("pe_dim"), row["seq_len"],
               row.get("data", "sample"), row.get("n_train", 0),
               row.get("max_steps", 0)).cost(config)


def estimate_rows(seeds, n_jobs):
    """The cost model's estimate of each preset's planned fits, on ``n_jobs`` workers."""
    workers = effective_n_jobs(n_jobs)
    rows = []
    for scale, preset in reproduce.SCALES.items():
        config = reproduce.with_sizes(preset, n_seeds=seeds)
        fits = planned_fits(config)
        # each fit once per seed of its own (the architectures': architecture_n_seeds)
        cpu = sum(fit.cost(config) * len(fit.seeds(config)) for fit in fits)
        rows.append({"scale": scale, "seeds": config.n_seeds,
                     "planned_fits": sum(len(fit.seeds(config)) for fit in fits),
                     "est_fit_cpu_s": cpu, "workers": workers,
                     "est_wall_s": cpu / workers})
    return rows


def main():
    p = common.parser(__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="quick", choices=sorted(reproduce.SCALES))
    p.add_argument("--seeds", type=int, default=None, help="number of seeds")
    p.add_argument("--n-jobs", type=int, default=-1, help="parallel fits (default: all cores)")
    p.add_argument("--from", dest="source", type=Path, default=None,
                   help="read this results.json instead of running")
    p.add_argument("--estimate", action="store_true",
                   help="print the cost model's estimate per preset and stop")
    args = p.parse_args()
    estimates_table = estimate_rows(args.seeds, args.n_jobs)
    common.print_table("Estimated by the cost model, per preset (planned fits)",
                       list(estimates_table[0]), estimates_table)
    if args.estimate:
        return
    if args.source is not None:
        results = json.loads(args.source.read_text())
        config = reproduce.ReproductionConfig(**{
            k: (reproduce.Training(**v) if isinstance(v, dict) else
                tuple(v) if isinstance(v, list) else v)
            for k, v in results["config"].items()})
    else:
        common.setup(args, repeats=1, quick_repeats=1)
        config = reproduce.with_sizes(reproduce.SCALES[args.scale], n_seeds=args.seeds,
                                      n_jobs=args.n_jobs, device=args.device)
        if effective_n_jobs(config.n_jobs) > 1:
            torch.set_num_threads(1)  # the fits run in the workers
        start = time.perf_counter()
        results = reproduce.run(config, progress=not args.quick)
        results["elapsed_s"] = time.perf_counter() - start
    per_experiment, per_model = timing_rows(results)
    estimates = {}
    for f in results["fits"]:
        key = (f["model_name"], f["seq_len"], fit_kind(f))
        estimates[key] = estimates.get(key, 0.0) + estimated(f, config)
    for row in per_model:
        row["cpu / estimate"] = row["cpu_s"] / estimates[
            row["model_name"], row["seq_len"], row["data"]]
    cpu = sum(fit_seconds(f) for f in results["fits"])
    workers = effective_n_jobs(config.n_jobs)
    run_row = {"scale": args.scale if args.source is None else str(args.source),
               "seeds": config.n_seeds, "fits": len(results["fits"]),
               "wall_s": results["elapsed_s"], "fit_cpu_s": cpu, "workers": workers,
               "efficiency": cpu / (results["elapsed_s"] * workers)}
    common.print_table("The run", list(run_row), [run_row])
    common.print_table("Per experiment (fit CPU seconds)", list(per_experiment[0]),
                       per_experiment)
    common.print_table("Per model and T", list(per_model[0]), per_model)
    if args.source is None:
        common.write_json(args, f"reproduce_{args.scale}", {
            "run": run_row, "per_experiment": per_experiment, "per_model": per_model})


if __name__ == "__main__":
    main()
