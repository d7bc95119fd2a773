"""Claim 3, alignment: gradient descent from W = 0 turns W towards the identity.

The length-generalisation fits carry an ``AlignmentRecorder``: the cosine
similarity <W, I> / (||W||_F sqrt(d_p)) against the number of training
sequences seen, from step 0 (W = 0, alignment 0 by definition) and
log-spaced in steps, so the rise within the first epoch is seen. The verdict
is the same at every scale: starting from W = 0, the paper's model ends at or
above ``alignment_final`` (mean over seeds, and seed by seed), however early
in training it got there.
"""

from ._experiment import Experiment, config_of, fmt_spread, markdown_table, select, summarise
from ._figures import band, legend_below, pyplot, task_title
from ._models import Fit

MODELS = ("paper", "ensemble", "fixed")


class Alignment(Experiment):
    name = "alignment"
    title = "Alignment of W with the identity"

    def fits(self, config):
        return [Fit(model, config.length_pe_dim, config.seq_len) for model in MODELS]

    def collect(self, config, records, found=None):
        rows = []
        for fit in self.fits(config):
            for seed in config.seeds():
                r = records[fit, seed]
                rows += [{"model": fit.model, "model_name": r["model_name"],
                          "pe_dim": fit.width, "seed": seed, **point} for point in r["trace"]]
        summary = summarise(rows, ["model", "model_name", "step"],
                            ["sequences_seen", "alignment", "w_scale"])
        return {"rows": rows, "summary": summary}

    tables = {"alignment.csv": "rows"}

    def summary(self, results):
        config, section, names = config_of(results), results[self.name], results["models"]
        paper = select(section["summary"], "step", model="paper")
        shown = [r for r in paper if r["step"] in (0, 1, 2, 4, 8, 16, 32, 64, 128)
                 or r is paper[-1]]
        lines = [f"{names['paper']['name']}, pe_dim={config.length_pe_dim}: alignment and "
                 f"scale <W, I>/d_p against training sequences seen, mean ± sd over "
                 f"{config.n_seeds} seeds (every point in alignment.csv).", ""]
        lines += markdown_table(
            ["step", "sequences seen", "alignment", "scale <W, I>/d_p"],
            [[str(r["step"]), f"{r['sequences_seen_mean']:.0f}", fmt_spread(r, "alignment"),
              fmt_spread(r, "w_scale", ".2f")] for r in shown])
        return lines

    def figures(self):
        return {"alignment.png": plot_alignment}


def plot_alignment(results):
    """Alignment of W with I, and its scale, against training sequences seen (log x).
    """
    plt = pyplot()
    config, section = config_of(results), results["alignment"]
    fig, (ax, ax_scale) = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    first = min((r["sequences_seen_mean"] for r in section["summary"]
                 if r["sequences_seen_mean"] > 0), default=1)
    for model in MODELS:
        rows = select(section["summary"], "step", model=model)
        x = [r["sequences_seen_mean"] for r in rows]
        band(ax, x, rows, "alignment", model=model, label=results["models"][model]["name"])
        band(ax_scale, x, rows, "w_scale", model=model, label=None)
    for a in (ax, ax_scale):
        # linear between 0 and the first batch, so that step 0 (W = 0) shows
        a.set_xscale("symlog", linthresh=first)
        a.axvline(config.n_samples, color="gray", alpha=0.4)
        a.set_xlabel("training sequences seen (line: one epoch)")
    ax.axhline(1, color="black", linestyle="--", alpha=0.4)
    ax.set(ylim=(min(0, ax.get_ylim()[0]), 1.05),
           ylabel="<W, I> / (|W|_F sqrt(d_p))", title="Alignment of W with I")
    ax_scale.set(ylabel="<W, I> / d_p", title="Scale c of W ~ c I")
    legend_below(fig, ax, ncol=3)
    fig.suptitle(f"pe_dim={config.length_pe_dim}; {task_title(config)}", fontsize=9)
    return fig


EXPERIMENT = Alignment()
