"""Verdict 4, transformer width scaling: pe_dim* against T over a range that can decide it.

pe_dim* is the smallest ``pe_dim`` whose mean validation R^2 over the seeds
reaches 0.8, for the paper's model (one positional draw), at each T of
``scaling_seq_lens()``, found by the bracketing search of :mod:`._bracket`
(from ``scaling_pe_start`` at the smallest T, from the pe_dim* before at each
later T; refined to a factor sqrt(2)); its held-out R^2 beside it. Every fit
trains on ``scaling_n_train`` fresh sequences every epoch with Adam's rate
scaled as 1/sqrt(pe_dim) (``Training.lr_ref_width``), so that the training
does not set pe_dim*; at ``scaling_check_len`` the two pe_dim around the
crossing are refitted with twice the sequences (and steps) to check it.
"""

import math
from functools import partial

import numpy as np

from ..theory import transformer_pe_scale
from ._bracket import (
    TARGET_R2,
    bracket_text,
    check_line,
    critical_searches,
    critical_section,
    r2_text,
)
from ._experiment import Experiment, config_of, fmt, loglog_slope, markdown_table
from ._figures import STYLES, legend_beside, legend_or_note, pyplot
from ._models import Fit

MODEL = "paper_scaling"


def _fit(config, T, pe_dim, factor=1):
    return Fit(MODEL, pe_dim, T, "population", n_train=factor * config.scaling_n_train)


def bootstrap_slope(points_by_T, seeds, *, n_boot=1000, level=0.9, random_state=0,
                    target=TARGET_R2):
    """Percentile interval of the log-log slope of the critical width, over seeds.

    Resamples the seeds with replacement; in each resample the critical width
    at each T is the smallest evaluated width whose mean validation R^2 over
    the resampled seeds reaches ``target``. Returns ``(low, high, n_used)``
    (NaN when fewer than two seeds or no resample has a width at every T).
    """
    lens = sorted(points_by_T)
    if len(seeds) < 2 or len(lens) < 2:
        return math.nan, math.nan, 0
    rng = np.random.default_rng(random_state)
    tables = {T: {(p["value"], p["seed"]): p["val_r2"] for p in points_by_T[T]} for T in lens}
    widths = {T: sorted({w for w, _ in tables[T]}) for T in lens}
    slopes = []
    for _ in range(n_boot):
        draw = rng.choice(seeds, size=len(seeds), replace=True)
        stars = []
        for T in lens:
            star = next((w for w in widths[T]
                         if np.mean([tables[T].get((w, s), math.nan) for s in draw]) >= target),
                        None)
            stars.append(star)
        if all(stars):
            slopes.append(loglog_slope(lens, stars))
    if not slopes:
        return math.nan, math.nan, 0
    tail = 100 * (1 - level) / 2
    return float(np.percentile(slopes, tail)), float(np.percentile(slopes, 100 - tail)), \
        len(slopes)


class WidthScaling(Experiment):
    name = "width_scaling"
    title = "Transformer width scaling: pe_dim* against T (paper's model, population)"

    def search(self, config):
        return critical_searches(
            config, config.scaling_seq_lens(), partial(_fit, config),
            lambda T, previous: previous.width if previous and previous.width
            else config.scaling_pe_start,
            floor=lambda T: config.scaling_pe_floor, stop=lambda T: config.scaling_pe_stop,
            check_len=config.scaling_check_len)

    def collect(self, config, records, found=None):
        brackets = found[0]
        s = critical_section(
            config, records, found, partial(_fit, config), "pe_dim", MODEL, lambda T: {
                "width_star": None if brackets[T].width is None
                else config.token_dim + brackets[T].width,
                "q_log_t": transformer_pe_scale(T, config.n_selected)},
            {"seq_len": config.scaling_check_len, "n_train": 2 * config.scaling_n_train})
        found = [r for r in s["critical"] if r["star"] is not None]
        slope = loglog_slope([r["seq_len"] for r in found], [r["star"] for r in found]) \
            if len(found) >= 2 else None
        low, high, used = bootstrap_slope(
            {r["seq_len"]: [p for p in s["points"] if p["seq_len"] == r["seq_len"]]
             for r in found}, config.seeds())
        return {**s, "n_train": config.scaling_n_train,
                "steps": config.scaling_training.steps(config.scaling_n_train),
                "lr": config.scaling_training.lr,
                "lr_ref_width": config.scaling_training.lr_ref_width, "slope": slope,
                "slope_interval": [None if math.isnan(low) else low,
                                   None if math.isnan(high) else high],
                "slope_interval_level": 0.9, "slope_bootstrap_resamples": used}

    tables = {"width_scaling_points.csv": "points", "width_scaling.csv": "critical",
              "width_scaling_per_seed.csv": "critical_per_seed"}

    def summary(self, results):
        config, s = config_of(results), results[self.name]
        lines = [f"{s['model_name']}: the smallest pe_dim whose validation R^2 (mean over "
                 f"{config.n_seeds} seed{'s' if config.n_seeds > 1 else ''}) reaches "
                 f"{s['target_r2']}, by a bracketing search refined to a factor "
                 f"{s['refine']:.3f}; trained on the population ({s['n_train']} fresh "
                 f"sequences every epoch, {s['steps']} steps); its held-out R^2 beside it.",
                 ""]
        rows = [[str(r["seq_len"]), fmt(r["star"], "d") if r["star"] else "-",
                 bracket_text(r), r["status"],
                 r2_text(r), f"{r['q_log_t']:.1f}",
                 ", ".join(str(w) for w in r["evaluated"])] for r in s["critical"]]
        lines += markdown_table(["T", "pe_dim*", "bracket", "search", "held-out R^2",
                                 "q log T", "pe_dim fitted"], rows,
                                ["r", "r", "r", "l", "r", "r", "l"])
        lines += ["", f"Log-log slope of pe_dim* against T: {fmt(s['slope'], '.2f')}"
                  + _interval(s) + "."]
        if s["check"]:
            c = s["check"]
            lines.append(check_line(c, f"pe_dim {c['lower']}", c["upper"], "pe_dim*"))
        return lines

    def figures(self):
        return {"width_scaling.png": plot_width_scaling}


def _interval(section):
    low, high = section["slope_interval"]
    if low is None:
        return " (one seed or too few T: no bootstrap interval over seeds)"
    return (f", {section['slope_interval_level']:.0%} bootstrap interval over seeds "
            f"[{low:.2f}, {high:.2f}]")


def plot_width_scaling(results):
    """pe_dim* against T (log axes, each seed's own), beside q log T, (q log T)^2 and T."""
    plt = pyplot()
    config, s = config_of(results), results["width_scaling"]
    q = config.n_selected
    rows = [r for r in s["critical"] if r["star"] is not None]
    fig, ax = plt.subplots(figsize=(10, 4.6), layout="constrained")
    if rows:
        lens = np.array([r["seq_len"] for r in rows], dtype=float)
        stars = np.array([r["star"] for r in rows], dtype=float)
        lower = np.array([r["lower"] or r["star"] for r in rows], dtype=float)
        ax.errorbar(lens, stars, yerr=[stars - lower, np.zeros_like(stars)], capsize=3,
                    label=f"pe_dim* (mean R^2 over {config.n_seeds} seeds); bar: bracket",
                    **STYLES["paper"])
        seeds = [p for p in s["critical_per_seed"] if p["star"] is not None]
        ax.scatter([p["seq_len"] * (1 + 0.03 * (p["seed"] % 3 - 1)) for p in seeds],
                   [p["star"] for p in seeds], s=14, marker="x", color="tab:blue", alpha=0.6,
                   label="each seed's own pe_dim* (on the fitted widths)")
        ts = np.geomspace(lens[0], lens[-1], 50)
        first = stars[0]
        for curve, label, style in (
                (q * np.log(ts), "q log T", "--"), ((q * np.log(ts)) ** 2, "(q log T)^2", "-."),
                (ts, "T", ":")):
            ax.plot(ts, first * curve / curve[0], linestyle=style, color="gray",
                    label=f"{label}, scaled through the first point")
    missed = [r for r in s["critical"] if r["star"] is None]
    if missed:
        ax.scatter([r["seq_len"] for r in missed], [r["lower"] for r in missed], marker="^",
                   s=50, color="tab:blue", label="not reached up to this pe_dim")
    if rows or missed:
        every = sorted(r["seq_len"] for r in s["critical"])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(every, [str(int(T)) for T in every])
    ax.set(xlabel="sequence length T", ylabel="pe_dim* (validation R^2 >= "
           f"{s['target_r2']})",
           title=f"Transformer width scaling, paper's model on the population\n"
                 f"slope {fmt(s['slope'], '.2f')}{_interval(s)}\n(d={config.token_dim}, "
                 f"q={q}; {config.n_seeds} seeds)")
    legend_or_note(ax, legend_beside)
    return fig


EXPERIMENT = WidthScaling()
