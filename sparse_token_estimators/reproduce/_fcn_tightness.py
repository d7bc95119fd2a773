"""Verdict 5, FCN tightness: on the population, an FCN of a small multiple of T d reaches R^2 0.8.

No FCN reaches R^2 0.8 below the width the width-aware bound allows (about
0.8 T d; a sanity check). What can fail: m*, the smallest ``hidden_width``
whose score reaches 0.8 at each T of ``tightness_seq_lens()``, by the
protocol of the second set of verdicts (:mod:`._bracket`: the best mean
validation R^2 over the FCN's learning-rate grid, the crossing confirmed at
the next width, both bracketing widths, or the widest past the stop,
refitted with twice the sequences and steps at every T; each rate a peak
decayed by a cosine over the fit's steps where ``tightness_training``'s
``lr_schedule`` is "cosine", the third set's recipe); the search starts
at the bound's width and stops at 4 T d, the verdict's limit; trained on
``tightness_n_train(T)`` fresh sequences every epoch. The figure: d +
pe_dim* of the transformer's scaling law and m* of the FCN against T d.
"""

import numpy as np

from ..theory import fcn_critical_width
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
    star_text,
    steps_text,
)
from ._experiment import Experiment, config_of, fmt, markdown_table, seeds_text
from ._figures import (
    STYLES,
    found_with_bracket,
    legend_or_note,
    not_reached,
    powers_of_two_ticks,
    pyplot,
    unsettled_entry,
    unsettled_marks,
)
from ._models import model_name

MODEL = "fcn_tightness"
#: the verdict's limit on m*, in multiples of T d: the search stops there
MAX_FACTOR = 4


def _bound_width(config, T):
    """The narrowest FCN the width-aware bound allows to reach the target at T."""
    return fcn_critical_width(T, config.n_selected, config.token_dim, TARGET_R2)


class FCNTightness(Experiment):
    name = "fcn_tightness"
    title = "FCN tightness on the population: m* against T d"

    def search(self, config):
        d = config.token_dim
        return protocol_searches(
            config, config.tightness_seq_lens(), [MODEL], n_train=config.tightness_n_train,
            start=lambda key, T, previous: _bound_width(config, T),
            stop=lambda key, T: MAX_FACTOR * T * d,
            floor=lambda key, T: max(1, min(_bound_width(config, T), T * d) // 2),
            again=fourth_set(config.tightness_training), side_by_side=True)

    def collect(self, config, records, found=None):
        d, training = config.token_dim, config.tightness_training

        def extra(row):
            T, times, bound = row["seq_len"], row["steps_multiplier"], row["upper_bound"]
            n_train = config.tightness_n_train(T)
            return {"stop": MAX_FACTOR * T * d, "bound_width": _bound_width(config, T),
                    "n_train": times * n_train, "steps": training.steps(times * n_train),
                    "check_steps": training.steps(2 * times * n_train),
                    "first_steps": training.steps(n_train) if row["searched_again"] else None,
                    "star_over_td": None if row["star"] is None else row["star"] / row["td"],
                    "bound_over_td": _bound_width(config, T) / row["td"],
                    # the fourth set's second rule: an unsettled m* bounds it from above
                    "bound_met": None if row["settled"] or bound is None
                    or not fourth_set(training) else bound <= MAX_FACTOR * row["td"]}

        return {"max_factor": MAX_FACTOR, "model": MODEL,
                "model_name": model_name(MODEL, config),
                "lr_grid": list(config.lr_grid("fcn")),
                **critical_section(config, found, records, "hidden_width", extra,
                                   again=fourth_set(training))}

    tables = {"fcn_tightness_points.csv": "points", "fcn_tightness.csv": "critical",
              "fcn_tightness_per_seed.csv": "critical_per_seed"}

    def summary(self, results):
        config, s = config_of(results), results[self.name]
        lines = [f"{s['model_name']}: the smallest hidden_width m* whose validation R^2 "
                 f"{scoring_text(s, config.n_seeds)}, searched from the bound's width up to "
                 f"{s['max_factor']} T*d, refined to a factor {s['refine']:.3f} and confirmed "
                 "at the next width, trained on fresh sequences every epoch (steps per T: "
                 f"{steps_text(s)}); both bracketing "
                 "widths (past the stop: the widest) refitted with twice the sequences and "
                 "steps at every T" + again_text(s) + "; beside it, the narrowest width the "
                 "bound allows (sanity check, guaranteed).", ""]
        lines += critical_table(s["critical"], [
            "T", Column("T*d", lambda r: str(r["td"])), "width", "bracket", "search",
            Column("m* / T*d", lambda r: fmt(r["star_over_td"], ".2f")),
            Column("bound's width", lambda r: str(r["bound_width"])),
            Column("/ T*d", lambda r: f"{r['bound_over_td']:.2f}"),
            "held-out R^2", "rate", "2x steps",
            Column("sequences per epoch", lambda r: f"{r['n_train']} x {r['steps']} steps", "l"),
            "rates"], width="m*", rate="rate at m*", rates="rate chosen per m")
        lines += reason_lines(s["critical"])
        return lines + separation_lines(results)

    def figures(self):
        return {"critical_widths.png": plot_critical_widths}


def separation_lines(results):
    """The width separation at every T of the two searches: the transformer's
    d + pe_dim*, the FCN's m* where measured, and the bound's width at every T."""
    config = config_of(results)
    d, q = config.token_dim, config.n_selected
    scaling = {r["seq_len"]: r for r in results.get("width_scaling", {}).get("critical", [])}
    fcn = {r["seq_len"]: r for r in results[FCNTightness.name]["critical"]}
    if not scaling:
        return []
    target = results[FCNTightness.name]["target_r2"]

    def width(row, offset):
        return "not searched" if row is None else star_text(row, offset)

    rows = [[str(T), str(T * d), width(scaling.get(T), d), width(fcn.get(T), 0),
             str(fcn_critical_width(T, q, d, target))] for T in sorted({*scaling, *fcn})]
    return ["", f"The width separation at every T (validation R^2 >= {target}, mean over "
            f"{seeds_text(config.n_seeds)}): the paper's model's (one positional draw) d + "
            "pe_dim* against the FCN's m* where it was searched, and the narrowest FCN the "
            "bound allows at every T (no FCN narrower reaches the target).", ""] + \
        markdown_table(["T", "T*d", "paper's model d + pe_dim*", "FCN m*", "bound's width"],
                       rows)


def plot_critical_widths(results):
    """The separation at every T: d + pe_dim* and m* against T d (log axes)."""
    plt = pyplot()
    config = config_of(results)
    d = config.token_dim
    fig, ax = plt.subplots(figsize=(8, 4.6))
    critical = {key: results.get(key, {}).get("critical", [])
                for key in ("width_scaling", "fcn_tightness")}
    plotted, opened = [], False
    for key, offset, model, label in (
            ("width_scaling", d, "paper", "transformer (paper's model): d + pe_dim*"),
            ("fcn_tightness", 0, "fcn", "FCN: m*")):
        every = critical[key]
        missed = [r for r in every if not r["star"] and r["lower"]]
        if missed:
            not_reached(ax, [r["td"] for r in missed], [offset + r["lower"] for r in missed],
                        color=STYLES[model].get("color"),
                        label=f"{label.split(':')[0]}: not reached up to here")
            plotted += [r["td"] for r in missed] + [offset + r["lower"] for r in missed]
        rows = [r for r in every if r["star"]]
        if not rows:
            continue
        td = [r["td"] for r in rows]
        plotted += td + list(found_with_bracket(ax, td, rows, offset, label=label,
                                                **STYLES[model]))
        opened |= unsettled_marks(ax, td, rows, offset, color=STYLES[model]["color"],
                                  marker=STYLES[model]["marker"])
    if opened:
        unsettled_entry(ax)
    best = [r for r in critical["width_scaling"] if r.get("pe_dim_best")]
    if best:
        ax.plot([r["td"] for r in best], [d + r["pe_dim_best"] for r in best], color="black",
                marker="s", markersize=4, linestyle="-",
                label="d + pe_dim_best: the transformer's best case (theory)")
        plotted += [r["td"] for r in best] + [d + r["pe_dim_best"] for r in best]
    # the bound's width at every T either search measured: the separation where no
    # FCN was fitted too (no FCN narrower than it reaches R^2 0.8)
    if plotted:
        lens = sorted({r["seq_len"] for rows in critical.values() for r in rows})
        target = results.get("fcn_tightness", results.get("width_scaling"))["target_r2"]
        ax.plot([T * d for T in lens],
                [fcn_critical_width(T, config.n_selected, d, target) for T in lens],
                linestyle=":", color="tab:red", marker=".",
                label="narrowest FCN the bound allows (theory)")
        span = np.geomspace(min(plotted), max(plotted), 20)
        ax.plot(span, span, color="gray", linestyle="--", label="width = T*d")
        ax.plot(span, MAX_FACTOR * span, color="gray", linestyle="-.",
                label=f"width = {MAX_FACTOR} T*d (verdict 5's limit)")
    ax.set(xscale="log", yscale="log", xlabel="T*d (T at d = "
           f"{d})", ylabel="critical width (R^2 >= 0.8)",
           title="Critical widths against T*d (trained on the population)\n"
                 f"d={d}, q={config.n_selected}; {config.n_seeds} seeds")
    if plotted:
        powers_of_two_ticks(ax.xaxis, plotted)
    legend_or_note(ax, lambda ax: ax.legend(fontsize=8, loc="upper left",
                                            bbox_to_anchor=(1.01, 1.0)))
    fig.tight_layout()
    return fig


EXPERIMENT = FCNTightness()
