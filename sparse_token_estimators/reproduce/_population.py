"""Approximation against estimation: the same widths trained on the population and on a sample.

The FCN at widths m below T d, the paper's model at the same widths
d + pe_dim and the ensemble beside it, trained on the population
(``n_train(T)`` fresh sequences every epoch) and on one fixed sample of as
many (the same steps). Guaranteed, a sanity check: no FCN of width m goes
below ``fcn_lower_bound``. Measured: how close the population-trained FCN
gets to it, and the estimation gap (fixed-sample minus population held-out
loss). Judged: on the population, the paper's model goes at least
``population_margin`` below the FCN's bound at the widths the theory names.
"""

import math

from ._experiment import (
    Experiment,
    bound_at,
    config_of,
    fcn_bound,
    find,
    fmt,
    fmt_spread,
    markdown_table,
    select,
    summarise,
)
from ._figures import (
    SHORT,
    STYLES,
    band,
    legend_below,
    legend_beside,
    powers_of_two_ticks,
    pyplot,
    task_title,
)
from ._models import Fit

MODELS = ("fcn", "paper", "ensemble")
VALUES = ("test_loss", "test_r2", "train_loss", "bound_ratio")


def population_grid(config):
    """``{model: [width parameter, ...]}`` of the experiment: every width below T d.

    The paper's model at ``population_pe_dims``, the FCN at the same widths
    d + pe_dim, the ensemble at those of them also in ``ensemble_pe_dims``.
    """
    d, threshold = config.token_dim, config.seq_len * config.token_dim
    pe = [p for p in config.population_pe_dims if d + p < threshold]
    return {"fcn": [d + p for p in pe], "paper": pe,
            "ensemble": [p for p in pe if p in config.ensemble_pe_dims]}


class Population(Experiment):
    name = "population"
    title = "Approximation against estimation: training on the population"

    def fits(self, config):
        T = config.seq_len
        return [Fit(model, w, T, data) for model, grid in population_grid(config).items()
                for w in grid for data in ("population", "sample")]

    def collect(self, config, records, found=None):
        rows, gaps = [], []
        for fit in sorted(self.fits(config)):
            for seed in config.seeds():
                r = records[fit, seed]
                bound = bound_at(config, r["width"])
                rows.append({
                    "model": fit.model, "model_name": r["model_name"], "data": fit.data,
                    "width": r["width"], "hidden_width": r.get("hidden_width"),
                    "pe_dim": r.get("pe_dim"), "seed": seed, "n_train": r["n_train"],
                    "test_loss": r["test_loss"], "test_loss_se": r["test_loss_se"],
                    "test_r2": r["test_r2"], "train_loss": r["train_loss"],
                    **bound, "bound_ratio": r["test_loss"] / bound["fcn_bound"]
                    if bound["fcn_bound"] > 0 else math.nan,
                    "fit_cpu_s": r["fit_cpu_s"],
                })
        for row in rows:
            if row["data"] != "population":
                continue
            sample = find(rows, model=row["model"], width=row["width"], seed=row["seed"],
                          data="sample")
            gap = sample["test_loss"] - row["test_loss"]
            gaps.append({"model": row["model"], "model_name": row["model_name"],
                         "width": row["width"], "seed": row["seed"],
                         "population_loss": row["test_loss"], "sample_loss": sample["test_loss"],
                         "estimation_gap": gap,
                         "relative_gap": gap / row["test_loss"],
                         "fcn_bound": row["fcn_bound"],
                         "excess_over_bound": row["test_loss"] - row["fcn_bound"]})
        return {
            "n_train": config.n_train(config.seq_len),
            "rows": rows,
            "summary": summarise(rows, ["model", "model_name", "data", "width"], VALUES),
            "gaps": gaps,
            "gaps_summary": summarise(gaps, ["model", "model_name", "width"],
                                      ["population_loss", "sample_loss", "estimation_gap",
                                       "relative_gap", "excess_over_bound"]),
        }

    tables = {"population.csv": "rows", "population_summary.csv": "summary",
              "estimation_gap.csv": "gaps"}

    def summary(self, results):
        config, section = config_of(results), results[self.name]
        n = section["n_train"]
        lines = [
            f"Held-out loss (summed over d), mean ± sd over {config.n_seeds} seeds, of each "
            f"model trained on the population ({n} fresh sequences every epoch) and on one "
            f"fixed sample of {n} sequences (same epochs and batch size: the same steps). "
            "Estimation gap: fixed-sample loss minus population loss, per seed, then "
            "averaged. Measured, not judged (population.csv, estimation_gap.csv).", ""]
        rows = []
        for model in MODELS:
            for g in (r for r in section["gaps_summary"] if r["model"] == model):
                w = g["width"]
                pop = find(section["summary"], model=model, data="population", width=w)
                rows.append([SHORT[model], str(w), fmt(fcn_bound(config, w)),
                             fmt_spread(pop, "test_loss"),
                             fmt(pop["bound_ratio_mean"], ".2f") + "x",
                             fmt_spread(g, "sample_loss"), fmt_spread(g, "estimation_gap")])
        lines += markdown_table(["model", "width (FCN: m; transformers: d + pe_dim)",
                                 "FCN bound", "population loss",
                                 "/ bound", "fixed-sample loss", "estimation gap"], rows,
                                ["l", "r", "r", "r", "r", "r", "r"])
        return lines + ["", self.sentence(results)]

    def sentence(self, results):
        """What the numbers show, in words (measured quantities, not verdicts)."""
        config, section = config_of(results), results[self.name]
        gaps = section["gaps_summary"]

        def span(values, spec):
            values = [v for v in values if math.isfinite(v)]
            if not values:
                return "-"
            low, high = min(values), max(values)
            return format(low, spec) if low == high else f"{low:{spec}} to {high:{spec}}"

        fcn = [g for g in gaps if g["model"] == "fcn"]
        paper = [g for g in gaps if g["model"] == "paper"]
        if not fcn or not paper:
            return ""
        excess = [find(section["summary"], model="fcn", data="population",
                       width=g["width"])["bound_ratio_mean"] - 1 for g in fcn]
        widths = ", ".join(str(g["width"]) for g in fcn)
        paper_ratio = [find(section["summary"], model="paper", data="population",
                            width=g["width"])["bound_ratio_mean"] for g in paper]
        share = [g["estimation_gap_mean"] / g["sample_loss_mean"] for g in fcn]
        return (
            f"Measured: trained on the population, the FCN at widths {widths} (below "
            f"T*d = {config.seq_len * config.token_dim}) ends "
            f"{span([100 * e for e in excess], '.0f')}% above its bound (held-out loss "
            f"{span([g['population_loss_mean'] for g in fcn], '.3f')}): no data can take it "
            "below the bound (approximation error), and the excess is what its training "
            "leaves. Trained on a fixed sample of the same size, its held-out loss differs "
            f"from the population's by {span([g['estimation_gap_mean'] for g in fcn], '+.3f')} "
            f"(the estimation error; {span([100 * x for x in share], '.0f')}% of its "
            "fixed-sample loss). The paper's transformer at the same widths reaches "
            f"{span([g['population_loss_mean'] for g in paper], '.3f')} on the population "
            f"({span(paper_ratio, '.2f')}x the FCN bound), with an estimation gap of "
            f"{span([g['estimation_gap_mean'] for g in paper], '+.3f')}."
        )

    def figures(self):
        return {"population.png": plot_population}


def plot_population(results):
    """Held-out loss against width, population against fixed sample; the estimation gap."""
    plt = pyplot()
    config, section = config_of(results), results["population"]
    fig, (ax, ax_gap) = plt.subplots(1, 2, figsize=(11, 5.6), layout="constrained",
                                     gridspec_kw={"width_ratios": [3, 2]})
    for model in MODELS:
        name = results["models"][model]["name"]
        for data, style in (("population", {}),
                            ("sample", {"linestyle": "--", "markerfacecolor": "none"})):
            rows = select(section["summary"], "width", model=model, data=data)
            if rows:
                label = f"{name}: {'population' if data == 'population' else 'fixed sample'}"
                band(ax, [r["width"] for r in rows], rows, "test_loss", model=model,
                     label=label, errorbars=True, **style)
        gaps = select(section["gaps_summary"], "width", model=model)
        if gaps:
            band(ax_gap, [g["width"] for g in gaps], gaps, "estimation_gap", model=model,
                 label=SHORT[model], errorbars=True)
    widths = sorted({r["width"] for r in section["summary"]})
    curve = [(m, fcn_bound(config, m)) for m in range(max(1, int(min(widths) / 1.5)),
                                                   config.seq_len * config.token_dim)]
    ax.plot([m for m, _ in curve], [b for _, b in curve], color=STYLES["fcn"]["color"],
            linestyle=":", label="FCN lower bound at width m (theory)")
    ax.set(xscale="log", yscale="log", xlabel="width (FCN: m; transformer: d + pe_dim)",
           ylabel="held-out loss (summed over d)",
           title=f"Population (fresh sequences every epoch)\nagainst a fixed sample of "
                 f"{section['n_train']}")
    powers_of_two_ticks(ax.xaxis, widths)
    legend_below(fig, ax)
    ax_gap.axhline(0, color="black", linewidth=0.5)
    ax_gap.set_xscale("log")
    powers_of_two_ticks(ax_gap.xaxis, widths)
    ax_gap.set(xlabel="width", ylabel="fixed-sample - population loss (summed over d)",
               title="Estimation error")
    legend_beside(ax_gap)
    fig.suptitle(task_title(config), fontsize=9)
    return fig


EXPERIMENT = Population()
