"""Claim 1, width separation: at equal width below T d, the transformer does what no FCN can.

The FCN (width m) and the transformer (width d + pe_dim) over their widths at
T. That every FCN below T d sits on or above ``theory.fcn_lower_bound`` is
guaranteed (a sanity check). What can fail: at d + pe_dim with q log T <=
pe_dim <= 4 q log T, the paper's model's mean held-out loss is at least
``separation_margin`` below the FCN's bound at the same width (a margin the
held-out sampling error, about sqrt(2 / (d n_test)), does not cross).
"""

from ._experiment import (
    Experiment,
    bound_at,
    config_of,
    find,
    fmt,
    fmt_spread,
    judged_widths,
    markdown_table,
    select,
    summarise,
    zero_loss,
)
from ._figures import (
    SHORT,
    STYLES,
    band,
    legend_beside,
    powers_of_two_ticks,
    pyplot,
    task_title,
)
from ._models import Fit

MODELS = ("fcn", "paper", "ensemble")
VALUES = ("test_loss", "test_r2", "val_r2", "train_loss", "fit_cpu_s")


class WidthSeparation(Experiment):
    name = "width_separation"
    title = "Width separation (held-out, at equal width)"

    def fits(self, config):
        T = config.seq_len
        return ([Fit("fcn", m, T) for m in config.fcn_widths()]
                + [Fit("paper", p, T) for p in config.pe_dims]
                + [Fit("ensemble", p, T) for p in config.ensemble_pe_dims])

    def collect(self, config, records, found=None):
        rows = []
        for fit in sorted(self.fits(config)):
            for seed in config.seeds():
                r = records[fit, seed]
                rows.append({
                    "model": r["model"], "model_name": r["model_name"], "width": r["width"],
                    "hidden_width": r.get("hidden_width"), "pe_dim": r.get("pe_dim"),
                    "seed": seed, **{k: r[k] for k in VALUES}, "test_loss_se": r["test_loss_se"],
                    **bound_at(config, r["width"])})
        bound_curve = [{"width": m, **bound_at(config, m)}
                       for m in range(1, config.seq_len * config.token_dim + 1)]
        return {"rows": rows, "summary": summarise(rows, ["model", "model_name", "width"], VALUES),
                "bound": bound_curve}

    tables = {"width_separation.csv": "rows", "width_separation_summary.csv": "summary"}

    def summary(self, results):
        config, section = config_of(results), results[self.name]
        summary = section["summary"]
        lines = [f"Held-out loss (summed over d) and R^2, mean ± sd over {config.n_seeds} "
                 "seeds; the FCN bound and the R^2 ceiling it implies are exact "
                 "(theory.fcn_lower_bound with the width).", ""]
        rows = []
        for w in sorted({r["width"] for r in summary}):
            cells = [str(w), *(fmt(v, ".3f") for v in bound_at(config, w).values())]
            for model in MODELS:
                r = find(summary, model=model, width=w)
                cells += [fmt_spread(r, "test_loss"), fmt_spread(r, "test_r2")]
            rows.append(cells)
        header = ["width", "FCN bound", "R^2 ceiling"]
        for model in MODELS:
            header += [f"{SHORT[model]} loss", f"{SHORT[model]} R^2"]
        return lines + markdown_table(header, rows)

    def figures(self):
        return {"width_separation.png": plot_width_separation}


def plot_width_separation(results):
    """Held-out loss against width for both models, with the FCN's bound as a curve over m.
    """
    plt = pyplot()
    config, section = config_of(results), results["width_separation"]
    summary = section["summary"]
    fig, ax = plt.subplots(figsize=(10, 4.4), layout="constrained")
    for model in MODELS:
        rows = select(summary, "width", model=model)
        if rows:
            band(ax, [r["width"] for r in rows], rows, "test_loss", model=model,
                 label=results["models"][model]["name"], errorbars=True)
    widths = [r["width"] for r in summary]
    curve = [r for r in section["bound"] if r["fcn_bound"] > 0 and r["width"] >= min(widths) / 1.5]
    ax.plot([r["width"] for r in curve], [r["fcn_bound"] for r in curve],
            color=STYLES["fcn"]["color"], linestyle="--",
            label="FCN lower bound at width m (theory)")
    threshold = config.seq_len * config.token_dim
    # named in the legend: a label on the plot would sit on the lines
    ax.axvline(threshold, color="gray", alpha=0.5, label=f"T*d = {threshold}")
    ax.axhline(zero_loss(config), color="black", linestyle="--", alpha=0.4, label="predict 0")
    for w in judged_widths(config):
        ax.axvline(w, color=STYLES["paper"]["color"], alpha=0.15, linewidth=6)
    ax.set(xscale="log", yscale="log")
    powers_of_two_ticks(ax.xaxis, widths)
    ax.set(xlabel="width (FCN: m; transformer: d + pe_dim)",
           ylabel="held-out loss (summed over d)",
           title=f"Width separation ({task_title(config)})\nshaded: the widths judged, "
                 "d + pe_dim for q log T <= pe_dim <= 4 q log T")
    legend_beside(ax)
    return fig


EXPERIMENT = WidthSeparation()
