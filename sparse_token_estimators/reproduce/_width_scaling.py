"""Verdict 4, transformer width scaling: pe_dim* against T, beside the best case.

pe_dim* is the smallest ``pe_dim`` whose score reaches 0.8 for the paper's
model (one positional draw) at each T of ``scaling_seq_lens()``, by the
protocol of the second set of verdicts (:mod:`._bracket`): a width's score
is the best mean validation R^2 over the transformer's learning-rate grid
(``lr_grids``), the crossing bracketed to a factor sqrt(2) and confirmed at
the next width, both bracketing widths refitted with twice the sequences
(and steps) at every T. The search at each T starts from the best case's
pe_dim there (:func:`search_start`; ``scaling_pe_start`` where wider), every
T at once (shrinking to ``scaling_pe_floor`` when its start passes). Every fit trains on
``scaling_n_train_at(T)`` fresh sequences every epoch (the steps per T of
the configuration), at the scaling training's ``lr_schedule`` (the third
set: each rate of the grid a peak decayed by a cosine over the fit's steps). Beside it, pe_dim_best:
the best case W = c I at its best c with fresh draws per sequence
(:func:`~sparse_token_estimators.theory.pe_dim_best`, no training).
"""

import math

import numpy as np

from ..theory import pe_dim_best, transformer_pe_scale
from ._bracket import (
    TARGET_R2,
    Column,
    again_text,
    critical_section,
    critical_table,
    fourth_set,
    protocol_searches,
    reason_lines,
    scoring_text,
    steps_text,
)
from ._experiment import Experiment, best_case, config_of, fmt, loglog_slope
from ._figures import (
    STYLES,
    found_with_bracket,
    legend_beside,
    legend_or_note,
    not_reached,
    pyplot,
    unsettled_marks,
)
from ._models import model_name
from ._verdicts import THRESHOLDS

MODEL = "paper_scaling"


def bootstrap_slope(points_by_T, seeds, *, n_boot=1000, level=0.9, random_state=0,
                    target=TARGET_R2):
    """Percentile interval of the log-log slope of the critical width, over seeds.

    Resamples the seeds with replacement; in each resample the critical width
    at each T is the smallest evaluated width whose mean validation R^2 over
    the resampled seeds reaches ``target``. Returns ``(low, high, n_used)``
    (None, None when fewer than two seeds or no resample has a width at every T).
    """
    lens = sorted(points_by_T)
    if len(seeds) < 2 or len(lens) < 2:
        return None, None, 0
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
        return None, None, 0
    tail = 100 * (1 - level) / 2
    return float(np.percentile(slopes, tail)), float(np.percentile(slopes, 100 - tail)), \
        len(slopes)


#: draws of the best case's quick estimate a search starts from (``search_start``): a
#: sixteenth of ``pe_dim_best``'s, a second at T = 128
START_DRAWS = 1000


def search_start(config, seq_len):
    """The pe_dim a search at ``seq_len`` starts from: the best case's (pe_dim_best, on
    ``START_DRAWS`` draws, a second at T = 128), or ``scaling_pe_start`` where that is
    wider. Every T starts from its own, so that every T is searched at once.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import QUICK
    >>> [search_start(QUICK, T) for T in (8, 128)]
    [17, 75]
    """
    return max(config.scaling_pe_start,
               pe_dim_best(seq_len, config.n_selected, TARGET_R2, n_draws=START_DRAWS))


class WidthScaling(Experiment):
    name = "width_scaling"
    title = "Transformer width scaling: pe_dim* against T (paper's model, population)"

    def search(self, config):
        return protocol_searches(
            config, config.scaling_seq_lens(), [MODEL],
            n_train=config.scaling_n_train_at,
            start=lambda key, T, previous: search_start(config, T),
            stop=lambda key, T: config.scaling_pe_stop,
            floor=lambda key, T: config.scaling_pe_floor,
            again=fourth_set(config.scaling_training), side_by_side=True)

    def collect(self, config, records, found=None):
        q, training = config.n_selected, config.scaling_training
        best = {T: best_case(T, q, TARGET_R2) for T in found}
        limit = THRESHOLDS["scaling_best_factor"]

        def extra(row):
            star, T, times = row["star"], row["seq_len"], row["steps_multiplier"]
            n_train, bound = config.scaling_n_train_at(T), row["upper_bound"]
            return {"width_star": None if star is None else config.token_dim + star,
                    "n_train": times * n_train, "steps": training.steps(times * n_train),
                    "check_steps": training.steps(2 * times * n_train),
                    "first_steps": training.steps(n_train) if row["searched_again"] else None,
                    "pe_dim_best": best[T],
                    "star_over_best": None if star is None else star / best[T],
                    "q_log_t": transformer_pe_scale(T, q),
                    # the fourth set's second rule: an unsettled pe_dim* bounds it from above
                    "bound_met": None if row["settled"] or bound is None
                    or not fourth_set(training) else bound <= limit * best[T]}

        s = critical_section(config, found, records, "pe_dim", extra,
                             again=fourth_set(training))
        rows = [r for r in s["critical"] if r["star"] is not None]
        slope = loglog_slope([r["seq_len"] for r in rows], [r["star"] for r in rows]) \
            if len(rows) >= 2 else None
        lens = sorted(best)
        best_slope = loglog_slope(lens, [best[T] for T in lens]) if len(lens) >= 2 else None
        low, high, used = bootstrap_slope(
            {r["seq_len"]: [p for p in s["points"] if p["seq_len"] == r["seq_len"]
                            and p["chosen"] and not p["steps_check"]
                            and p["steps_multiplier"] == r["steps_multiplier"]]
             for r in rows}, config.seeds())
        return {**s, "model": MODEL, "model_name": model_name(MODEL, config),
                "n_train": config.scaling_n_train,
                "steps": config.scaling_training.steps(config.scaling_n_train),
                "steps_per_T": {str(r["seq_len"]): r["steps"] for r in s["critical"]},
                "batch_size": config.scaling_training.batch_size,
                "lr_grid": list(config.lr_grid("transformer")), "slope": slope,
                "best_slope": best_slope,
                "slope_interval": [low, high],
                "slope_interval_level": 0.9, "slope_bootstrap_resamples": used}

    tables = {"width_scaling_points.csv": "points", "width_scaling.csv": "critical",
              "width_scaling_per_seed.csv": "critical_per_seed"}

    def summary(self, results):
        config, s = config_of(results), results[self.name]
        lines = [f"{s['model_name']}: the smallest pe_dim whose validation R^2 "
                 f"{scoring_text(s, config.n_seeds)}, by a bracketing search refined to a factor "
                 f"{s['refine']:.3f} and confirmed at the next width; trained on the "
                 f"population (fresh sequences every epoch; steps per T: {steps_text(s)}); "
                 "both bracketing widths refitted with twice the sequences and steps "
                 f"at every T (steps check){again_text(s)}. Beside it pe_dim_best: the best "
                 "case W = c I at "
                 "its best c, fresh positional draws per sequence, no training.", ""]
        lines += critical_table(s["critical"], [
            "T", "width", "bracket", "search",
            Column("pe_dim_best", lambda r: str(r["pe_dim_best"])),
            Column("/ best", lambda r: fmt(r["star_over_best"], ".2f")),
            "held-out R^2", "rate", "2x steps",
            Column("q log T", lambda r: f"{r['q_log_t']:.1f}"), "rates"],
            width="pe_dim*", rate="rate at pe_dim*", rates="rate chosen per pe_dim")
        lines += ["", f"Log-log slope of pe_dim* against T: {fmt(s['slope'], '.2f')}"
                  + _interval(s) + f"; of pe_dim_best: {fmt(s['best_slope'], '.2f')}."]
        return lines + reason_lines(s["critical"])

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
        stars = found_with_bracket(
            ax, lens, rows, label=f"pe_dim* (mean R^2 over {config.n_seeds} seeds); bar: bracket",
            **STYLES["paper"])
        unsettled_marks(ax, lens, rows, color=STYLES["paper"]["color"],
                        label="open: a pe_dim* the steps check did not settle (the "
                              "summary says why)")
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
    every = sorted(s["critical"], key=lambda r: r["seq_len"])
    lens_all = [r["seq_len"] for r in every]
    if every:
        best = np.array([r["pe_dim_best"] for r in every], dtype=float)
        ax.plot(lens_all, best, color="black", marker="s", markersize=4,
                label="pe_dim_best: best case W = c I, fresh draws (theory, no training)")
        ax.plot(lens_all, 1.5 * best, color="black", linestyle=":",
                label="1.5 x pe_dim_best (verdict 4's limit)")
    missed = [r for r in s["critical"] if r["star"] is None and r["lower"]]
    if missed:
        not_reached(ax, [r["seq_len"] for r in missed], [r["lower"] for r in missed],
                    color="tab:blue", label="not reached up to this pe_dim")
    if every:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(lens_all, [str(T) for T in lens_all])
    ax.set(xlabel="sequence length T", ylabel="pe_dim* (validation R^2 >= "
           f"{s['target_r2']})",
           title=f"Transformer width scaling, paper's model on the population\n"
                 f"best of {len(s['lr_grid'])} rates; slope {fmt(s['slope'], '.2f')}, best "
                 f"case {fmt(s.get('best_slope'), '.2f')}\n(d={config.token_dim}, q={q}; "
                 f"{config.n_seeds} seeds)")
    legend_or_note(ax, legend_beside)
    return fig


EXPERIMENT = WidthScaling()
