"""The report of a run: the results file, the tables, the figures and summary.md."""

import csv
import io
import math
from pathlib import Path

from . import _records
from ._experiment import architecture_seeds_text, config_of, markdown_table, seeds_text
from ._figures import DPI, pyplot
from ._registry import EXPERIMENTS
from ._verdicts import (
    FIXED_ON,
    FOURTH_SET_FIXED_ON,
    NOT_JUDGED,
    SECOND_SET_FIXED_ON,
    THIRD_SET_FIXED_ON,
    THRESHOLDS,
    assess_claims,
)

__all__ = ["THRESHOLDS", "assess_claims", "save_figures", "summary_markdown", "write_outputs"]


def figure_names(results=None):
    """The file names ``save_figures`` writes, in order (of the experiments that ran)."""
    return [name for experiment in EXPERIMENTS
            if results is None or experiment.name in results
            for name in experiment.figures()]


def draw_figures(results):
    """``(file name, matplotlib figure)`` of every figure, drawn one by one (the caller
    closes each)."""
    for experiment in (e for e in EXPERIMENTS if e.name in results):  # those that ran
        for name, draw in experiment.figures().items():
            yield name, draw(results)


def save_figures(results, out_dir, *, dpi=DPI):
    """Draw every experiment's figures into ``out_dir`` as PNG (atomically); their paths.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> with tempfile.TemporaryDirectory() as out:
    ...     names = [p.name for p in save_figures(run(SMOKE, progress=False), out)]
    >>> len(names), names[0], names[-1]
    (11, 'width_separation.png', 'architectures_lengths.png')
    """
    plt = pyplot()
    out = Path(out_dir)
    paths = []
    for name, fig in draw_figures(results):
        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=dpi)
        plt.close(fig)
        paths.append(_records.write_atomic(out / name, image.getvalue()))
    return paths


def _write_csv(path, rows):
    fields = list(dict.fromkeys(k for row in rows for k in row))
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fields)
    writer.writeheader()
    writer.writerows({k: ";".join(map(str, v)) if isinstance(v, list) else v
                      for k, v in row.items()} for row in rows)
    _records.write_atomic(path, text.getvalue())


def write_outputs(results, out_dir, *, plots=True, about=None):
    """Write results.json, the CSV tables, the figures, summary.md and manifest.json.

    Every file is written atomically. ``manifest.json`` is written first (what
    is about to be written) and last (with each file's size): files an earlier
    run listed there that this one does not write are removed, files no
    manifest lists are left alone. results.json is strict JSON (a NaN is
    ``null``, with ``"<key>_missing"`` beside it).

    Parameters
    ----------
    results : dict
        What ``run`` returned.
    out_dir : str or Path
        Created if missing.
    plots : bool, default=True
        Draw the figures (matplotlib).
    about : dict or None, default=None
        Written into the manifest (the command line's command, fits resumed).

    Returns
    -------
    paths : list of Path
        Every file written, the manifest last.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> with tempfile.TemporaryDirectory() as out:
    ...     names = [p.name for p in write_outputs(run(SMOKE, progress=False), out,
    ...                                            plots=False)]
    >>> names[:2], names[-2:], len(names)
    (['results.json', 'fits.csv'], ['summary.md', 'manifest.json'], 32)
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = {"fits.csv": results["fits"]}
    for experiment in EXPERIMENTS:
        if experiment.name in results:  # the experiments the run ran
            tables.update({name: results[experiment.name][key]
                           for name, key in experiment.tables.items()})
    figures = figure_names(results) if plots else []
    names = ["results.json", *tables, *figures, "summary.md"]
    _records.begin_outputs(out, names)
    written = [_records.write_atomic(out / "results.json", _records.dumps(results))]
    for name, rows in tables.items():
        _write_csv(out / name, rows)
        written.append(out / name)
    if plots:
        written += save_figures(results, out)
    written.append(_records.write_atomic(out / "summary.md",
                                         summary_markdown(results, figures=plots)))
    _records.finish_outputs(out, [p.name for p in written], **(about or {}))
    return written + [out / _records.MANIFEST]


def _shown(verdict):
    return verdict if verdict == "supported" else f"**{verdict}**"


def fit_seconds(fit):
    """A fit's CPU seconds (a learning curve's fit records none: its wall seconds)."""
    cpu = fit.get("fit_cpu_s", math.nan)
    return cpu if cpu is not None and math.isfinite(cpu) else fit["fit_s"]


def fit_kind(fit):
    """What a fit record trained on, as the timing tables name it."""
    return fit.get("data", "sample") + (" (learning curve)" if fit.get("max_steps") else "")


def timing_rows(results):
    """CPU seconds of the fits, per experiment (``own_cpu_s``: those no other experiment
    uses) and per model, T and kind of data."""
    fits = results["fits"]
    rows = []
    for experiment in EXPERIMENTS:
        used = [f for f in fits if experiment.name in f["used_by"]]
        rows.append({"experiment": experiment.name, "fits": len(used),
                     "cpu_s": sum(fit_seconds(f) for f in used),
                     "shared_fits": sum(len(f["used_by"]) > 1 for f in used),
                     "own_cpu_s": sum(fit_seconds(f) for f in used if len(f["used_by"]) == 1)})
    by_model = {}
    for f in fits:
        kind = fit_kind(f)
        key = (f["model_name"], f["seq_len"], kind)
        entry = by_model.setdefault(key, {"model_name": key[0], "seq_len": key[1],
                                          "data": kind, "fits": 0, "cpu_s": 0.0,
                                          "wall_s": 0.0})
        entry["fits"] += 1
        entry["cpu_s"] += fit_seconds(f)
        entry["wall_s"] += f["fit_s"]
    return rows, sorted(by_model.values(),
                        key=lambda r: (r["seq_len"], r["data"], r["model_name"]))


def measured_time(results):
    """The run's measured time, summed over every invocation whose fits it holds (each
    record's ``invocation``, ``n_workers``, and its job's ``started_at`` / ``ended_at`` /
    ``worker``): ``{"cpu_s", "wall_s", "busy_s", "utilisation", "invocations",
    "untimed"}``; ``wall_s`` is each invocation's first start to last end of a fit;
    ``utilisation`` busy worker-seconds over workers x wall; ``untimed``: fits whose
    records carry no times (made before records had them).

    Examples
    --------
    >>> fits = [{"fit_s": 1.0, "fit_cpu_s": 1.0, "invocation": 0.0, "n_workers": 2,
    ...          "started_at": 0.0, "ended_at": 4.0, "worker": "a"},
    ...         {"fit_s": 1.0, "fit_cpu_s": 1.0, "invocation": 0.0, "n_workers": 2,
    ...          "started_at": 0.0, "ended_at": 2.0, "worker": "b"}]
    >>> measured_time({"fits": fits})["utilisation"]
    0.75
    """
    runs, untimed, cpu = {}, 0, 0.0
    for f in results["fits"]:
        cpu += fit_seconds(f)
        if f.get("started_at") is None or f.get("invocation") is None:
            untimed += 1
            continue
        run = runs.setdefault(f["invocation"], {"workers": f.get("n_workers") or 1,
                                                "jobs": set()})
        run["jobs"].add((f.get("worker"), f["started_at"], f["ended_at"]))
    wall = busy = capacity = 0.0
    for run in runs.values():
        span = max(e for _, _, e in run["jobs"]) - min(s for _, s, _ in run["jobs"])
        wall += span
        busy += sum(e - s for _, s, e in run["jobs"])
        capacity += run["workers"] * span
    return {"cpu_s": cpu, "wall_s": wall, "busy_s": busy,
            "utilisation": busy / capacity if capacity else math.nan,
            "invocations": len(runs), "untimed": untimed}


def time_lines(results):
    """The summary's lines on time: the plan's estimate beside the measured CPU and wall
    time and the workers' utilisation."""
    measured, plan = measured_time(results), results.get("plan")
    lines = []
    if plan:
        lines.append(f"Estimated before the first fit (the cost model, {plan['n_workers']} "
                     f"worker{'s' if plan['n_workers'] != 1 else ''}): "
                     f"{plan['cpu_s']:.0f} CPU s of fits to make and score, "
                     f"{plan['wall_s']:.0f} s "
                     f"wall ({plan['planned_fits']} fits planned, about "
                     f"{plan['search_fits']} for the searches, {plan['resumed_fits']} "
                     "recorded before).")
    text = (f"Measured: {measured['cpu_s']:.0f} CPU s of training (every fit of the run), "
            f"{measured['busy_s']:.0f} s of the workers' (training, scoring, data); "
            f"{measured['wall_s']:.0f} s wall from the first fit's start to the last's end, "
            f"summed over the {measured['invocations']} invocation(s) that made them; worker "
            f"utilisation {measured['utilisation']:.2f} (busy worker-seconds over workers x "
            "wall)")
    if measured["untimed"]:
        text += (f"; {measured['untimed']} fit(s) carry no start and end times (recorded "
                 "by an earlier version) and are not in the wall time")
    return lines + [text + "."]


def summary_markdown(results, *, figures=True):
    """The Markdown summary: the run, each claim's verdict and evidence, the tables
    (``write_outputs`` writes it as summary.md)."""
    config, theory = config_of(results), results["theory"]
    seeds = ", ".join(str(seed) for seed in config.seeds())
    lines = [
        "# Sparse token selection: reproduction summary", "",
        f"Task: T={config.seq_len} tokens of dimension d={config.token_dim}, "
        f"q={config.n_selected} selected; {config.n_samples} training sequences at T "
        f"(in proportion to T elsewhere), {config.n_test} validation and {config.n_test} "
        f"held-out; " + (f"**{config.n_seeds} seeds** ({seeds}), each drawing its own data "
                         "and models: every number is a mean ± sd over the seeds (per seed "
                         "in the CSV files and results.json)." if config.n_seeds > 1 else
                         f"**1 seed** ({seeds}): no spread over seeds to show.")
        + (f" {architecture_seeds_text(config)}"
           if "architectures" in results and architecture_seeds_text(config) else "")
        + f" Run time {results['elapsed_s']:.0f} s.", "",
        "Units: losses are squared errors summed over the d coordinates (predicting 0 "
        f"scores d/q = {theory['zero_predictor_loss']:.3f}; skorch's `train_loss` is the "
        "per-coordinate MSE, d times smaller, and appears here multiplied by d); R^2 is "
        "scikit-learn's, averaged over the d outputs.", "",
        "Models (every row and legend names one):", ""]
    for model in results["models"].values():
        t = model["training"]
        grid = model.get("lr_grid")
        rate = f"lr={t['lr']}" if not grid else (
            f"in its critical-width searches each rate of the grid "
            f"{', '.join(f'{lr:g}' for lr in grid)} at every width (any other fit: lr="
            f"{t['lr']})")
        decay = (", each rate decayed to 0 by a cosine over the fit's steps"
                 if t.get("lr_schedule") == "cosine" else "")
        lines.append(f"- {model['name']}: Adam, {rate}{decay}, {t['max_epochs']} epochs, "
                     f"batch {t['batch_size']}.")
    lines += ["", "Wang, Wei, Hsu & Lee, *Transformers Provably Learn Sparse Token Selection "
              "While Fully-Connected Nets Cannot* (ICML 2024, arXiv:2406.06893); task of "
              "Sanford, Hsu & Telgarsky (NeurIPS 2023, arXiv:2306.02896).", "", "## Claims", ""]
    lines += [f"The thresholds were fixed on {FIXED_ON}, before any run that judges them, "
              "and are the same for every run: results.json records them under 'thresholds' "
              "(with 'fixed_on'), and the documentation's reproduction page (section "
              "'Verdicts, fixed before the run') gives each verdict's rule; a verdict the run "
              "is too small to decide is 'inconclusive', with the reason and the sizes that "
              "would decide it. Verdicts 4, 5 and 7 are judged by the set of verdicts their "
              "searches' recipe belongs to (a constant rate: the second set, fixed "
              f"{SECOND_SET_FIXED_ON}; the rate decayed by a cosine: the third, fixed "
              f"{THIRD_SET_FIXED_ON}; the same with a non-monotone search searched again with "
              "twice the steps and an unsettled width counting where its bound is met: the "
              f"fourth, fixed {FOURTH_SET_FIXED_ON}, for verdicts 4 and 5); each claim names "
              "its set.", ""]
    seeds_header = (f"mean of {config.n_seeds} seeds" if config.n_seeds > 1
                    else "1 seed (no spread)")
    lines += markdown_table(
        ["claim", "judged on", seeds_header, "seeds on their own"],
        [[c["claim"], c["model"], _shown(c["verdict"]) + (
            f" (mean of {seeds_text(c['n_seeds'])})" if c["n_seeds"] != config.n_seeds else ""),
          "not judged" if c["verdict"] == NOT_JUDGED else
          f"{c['seeds_supporting']} of {c['n_seeds']}"] for c in results["claims"]],
        ["l", "l", "l", "r"]) + [""]
    for c in results["claims"]:
        if c["verdict"] == NOT_JUDGED:  # verdict 7 at quick: the slice is indicative only
            lines += [f"- **{c['claim']}: not judged by this run ({NOT_JUDGED})**; model: "
                      f"{c['model']}. {c['statement']}", f"  Evidence: {c['evidence']}."]
            if c.get("note"):
                lines.append(f"  Note: {c['note']}")
            continue
        shown = c["verdict"] if c["verdict"] == "supported" else c["verdict"].upper()
        lines += [f"- **{c['claim']}: {shown} by this run** (judged on the mean over "
                  f"{seeds_text(c['n_seeds'])}; {c['seeds_supporting']} of "
                  f"{c['n_seeds']} support it on their own; model: {c['model']}; "
                  f"{c.get('set', 'first')} set of verdicts). "
                  f"{c['statement']}",
                  f"  Evidence: {c['evidence']}."]
        lines += [f"  Inconclusive: {reason}." for reason in c["inconclusive_reasons"]]
        lines += [f"  Note: {c['note']}"] if c.get("note") else []
        lines += [f"  Sanity check (guaranteed by the theory): {check['check']}: "
                  f"{'holds' if check['passed'] else 'FAILS'}." for check in c["sanity_checks"]]
    for experiment in (e for e in EXPERIMENTS if e.name in results):
        lines += ["", f"## {experiment.title}", ""] + experiment.summary(results)
    per_experiment, per_model = timing_rows(results)
    lines += ["", "## Where the time went", ""] + time_lines(results) + ["",
              "CPU seconds of the fits, summed over the seeds (one thread each; a fit shared "
              "between experiments "
              "counts in each; 'own': the fits no other experiment uses; the learning "
              "curves' fits: wall seconds in their worker).", ""]
    lines += markdown_table(["experiment", "fits", "shared", "CPU s", "own CPU s"],
                            [[r["experiment"], r["fits"], r["shared_fits"], f"{r['cpu_s']:.0f}",
                              f"{r['own_cpu_s']:.0f}"] for r in per_experiment],
                            ["l", "r", "r", "r", "r"])
    lines += [""] + markdown_table(
        ["model", "T", "data", "fits", "CPU s", "wall s"],
        [[r["model_name"], r["seq_len"], r["data"], r["fits"], f"{r['cpu_s']:.0f}",
          f"{r['wall_s']:.0f}"] for r in per_model], ["l", "r", "l", "r", "r", "r"])
    if figures:
        lines += ["", "## Figures", ""] + [f"![{name[:-4]}]({name})"
                                           for name in figure_names(results)]
    return "\n".join(lines) + "\n"
