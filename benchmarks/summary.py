"""Collect the benchmarks' JSON results into one table of targets and ratios.

Reads what the other scripts wrote into ``--out`` (default
``benchmarks/results``) and prints, for every target, the measured ratio and
the command that measured it. Missing results are listed as "not run".

    python benchmarks/summary.py
    python benchmarks/summary.py --out benchmarks/results/gpu-20260101-120000
"""

import argparse
import json
import statistics

import common


def load(folder, name):
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def paired(a, b, clock="wall"):
    """Median over repeats of time(a) / time(b), from two result rows."""
    return statistics.median(x / y for x, y in zip(a["times"][clock], b["times"][clock]))


def row(results, table, **match):
    for r in results[table]:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    raise KeyError(match)


def fit_targets(folder, device, batch_size):
    results = load(folder, f"fit_{device}_batch{batch_size}")
    command = f"python benchmarks/bench_fit.py --device {device} --batch-size {batch_size}"
    if results is None:
        return [{"target": f"fit, {device}, batch {batch_size}", "measured": "not run",
                 "command": command}]
    lines = []
    for model in dict.fromkeys(r["model"] for r in results["fit"]):
        hand = row(results, "fit", model=model, case="hand loop")
        est = row(results, "fit", model=model, case="estimator")
        if device == "cpu":
            lines.append({"target": f"{model} fit / hand loop <= 1.05 (CPU, batch {batch_size})",
                          "measured": f"{paired(est, hand):.2f} "
                                      f"(CPU time {paired(est, hand, 'cpu'):.2f})",
                          "command": command})
        else:
            lines.append({"target": f"{model} throughput / hand loop >= 0.9 "
                                    f"({device}, batch {batch_size})",
                          "measured": f"{paired(hand, est):.2f}", "command": command})
        for slow in ("skorch defaults", "estimator (DataLoader)"):
            try:
                other = row(results, "fit", model=model, case=slow)
            except KeyError:
                continue
            goal = " >= 1.5" if model.startswith("transformer") else ""
            lines.append({"target": f"{model}: {slow} / estimator{goal}",
                          "measured": f"{paired(other, est):.2f}", "command": command})
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=common.Path, default=common.RESULTS)
    args = p.parse_args()
    lines = fit_targets(args.out, "cpu", 256) + fit_targets(args.out, "cuda", 4096)

    generator = load(args.out, "generator")
    for shape in ("20, 8, 3", "80, 8, 3", "20, 2, 3"):
        measured = "not run"
        if generator is not None:
            r = [g for g in generator["generator"] if g["n, T, d, q"].endswith(shape)
                 and g["case"] == "make_sparse_selection"][0]
            measured = (f"{r['time vs float64 normals']:.2f} "
                        f"(vs float32: {r['time vs float32 normals']:.2f})")
        lines.append({"target": f"make_sparse_selection / numpy normals <= 1.2 "
                                f"(T, d, q = {shape})",
                      "measured": measured, "command": "python benchmarks/bench_generator.py"})

    search = load(args.out, "search")
    for model in ("transformer", "fcn"):
        measured = "not run"
        if search is not None:
            r = [s for s in search["search"] if s["model"] == model
                 and s["case"].startswith("n_jobs=") and s["case"] != "n_jobs=1"
                 and "threads" not in s["case"]][0]
            measured = f"{r['speed-up vs n_jobs=1']:.2f} ({r['case']})"
        lines.append({"target": f"{model}: GridSearchCV n_jobs=2 speed-up >= 1.6 (2 cores)",
                      "measured": measured, "command": "python benchmarks/bench_search.py"})

    scaling = load(args.out, "scaling_cpu")
    for model in ("transformer", "fcn"):
        for varies in ("seq_len", "n_samples"):
            measured = "not run"
            if scaling is not None:
                worst = max(s["time / size"] for s in scaling["scaling"]
                            if s["model"] == model and s["varies"] == varies)
                measured = f"{worst:.2f}"
            lines.append({"target": f"{model}: fit time / {varies} at most linear "
                                    "(largest time/size ratio, 1 = linear)",
                          "measured": measured, "command": "python benchmarks/bench_scaling.py"})

    for device in ("cpu", "cuda"):
        stream = load(args.out, f"stream_{device}")
        command = f"python benchmarks/bench_stream.py --device {device}"
        if stream is None or not stream["share"]:  # not run, or run with --skip-fit
            lines.append({"target": f"stream draws / stream fit <= 0.1 ({device})",
                          "measured": "not run", "command": command})
            continue
        for r in stream["share"]:
            lines.append({"target": f"{r['model']}: stream draws / stream fit <= 0.1 "
                                    f"({device}; stream fit / array fit in brackets)",
                          "measured": f"{r['draws / stream fit']:.3f} "
                                      f"({r['stream fit / array fit']:.2f})",
                          "command": command})

    common.print_table(f"Targets and measured ratios ({args.out})",
                       ["target", "measured", "command"], lines)


if __name__ == "__main__":
    main()
