"""Sample complexity, measured (beyond the paper): held-out R^2 against training-set size.

At each T of ``sample_seq_lens()``, learning curves of the paper's model and
the ensemble (at ``sample_pe_dim``) and of the FCN (``sample_fcn_width``) on
nested subsets of one pool per seed. Every fit of a curve takes the same
optimisation steps (its model's training on ``sample_budget`` sequences, a
``StepBudget``), so a small set is not also a short optimisation. Reported:
the smallest n whose mean held-out R^2 reaches ``sample_target_r2``,
interpolated in log n around the crossing ("<= n", "> n" at the grid's
ends), and the log-log slope of n* against T. Training R^2 on fewer than
``MIN_R2_VALUES`` numbers (n d) is left out. No verdict.
"""

import math

from ._experiment import (
    Experiment,
    config_of,
    find,
    loglog_slope,
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
from ._models import Fit, model_name, training

MODELS = ("paper", "ensemble", "fcn")
#: R^2 on a set is reported only when n d >= this: the variance it divides by is
#: then estimated within about 10% (relative standard error sqrt(2 / (n d)))
MIN_R2_VALUES = 200


def measurable_r2(n_samples, token_dim):
    """Whether R^2 over ``n_samples`` sequences of ``token_dim`` outputs is reported.

    Examples
    --------
    >>> measurable_r2(2, 8), measurable_r2(32, 8)
    (False, True)
    """
    return n_samples * token_dim >= MIN_R2_VALUES


def smallest_n(sizes, r2, target):
    """The smallest training-set size whose R^2 reaches ``target``, and how it was found.

    Parameters
    ----------
    sizes : sequence of int
        Increasing training-set sizes.
    r2 : sequence of float
        Held-out R^2 at each size.
    target : float

    Returns
    -------
    n : float or None
        Interpolated in log n before the first size at or above the target;
        the smallest size if it reaches it; None if none does.
    how : {"interpolated", "at or below the grid", "not reached"}

    Examples
    --------
    >>> n, how = smallest_n([100, 1000, 10000], [0.5, 0.8, 1.0], 0.9)
    >>> round(n), how
    (3162, 'interpolated')
    >>> smallest_n([100, 1000], [0.95, 0.99], 0.9), smallest_n([100, 1000], [0.5, 0.6], 0.9)
    ((100, 'at or below the grid'), (None, 'not reached'))
    """
    for i, (n, r) in enumerate(zip(sizes, r2)):
        if r >= target:
            if i == 0:
                return n, "at or below the grid"
            n0, r0 = sizes[i - 1], r2[i - 1]
            share = (target - r0) / (r - r0)
            return float(math.exp(math.log(n0) + share * (math.log(n) - math.log(n0)))), \
                "interpolated"
    return None, "not reached"


def shown(n, how, sizes):
    """``n*`` as a table shows it: the number, "<= n" or "> n"."""
    if how == "not reached":
        return f"> {max(sizes)}"
    if how == "at or below the grid":
        return f"<= {n}"
    return f"{n:.0f}"


class SampleComplexity(Experiment):
    name = "sample_complexity"
    title = "Sample complexity (measured, beyond the paper)"

    def fits(self, config):
        out = []
        for T in config.sample_seq_lens():
            for model in MODELS:
                fcn = model == "fcn"
                width = config.sample_fcn_width(T) if fcn else config.sample_pe_dim
                steps = training(model, config).steps(config.sample_budget)
                sizes = config.sample_fcn_sizes if fcn else config.sample_sizes
                out += [Fit(model, width, T, n_train=n, max_steps=steps) for n in sizes]
        return out

    def collect(self, config, records, found=None):
        target = config.sample_target_r2
        rows = []
        for fit in sorted(self.fits(config), key=lambda f: (f.seq_len, f.model, f.n_train)):
            for seed in config.seeds():
                r = records[fit, seed]
                rows.append({"model": fit.model, "model_name": r["model_name"],
                             "seq_len": fit.seq_len, "width": r["width"],
                             "hidden_width": r.get("hidden_width"), "pe_dim": r.get("pe_dim"),
                             "n_train": fit.n_train, "steps": fit.max_steps, "seed": seed,
                             # R^2 over a handful of sequences is no statistic: left out
                             "train_r2": r["train_r2"] if measurable_r2(
                                 fit.n_train, config.token_dim) else None,
                             "test_r2": r["test_r2"],
                             "fit_s": r["fit_s"]})
        summary = summarise(rows, ["model", "model_name", "seq_len", "n_train"],
                            ["test_r2", "train_r2"])
        minimal, per_seed = [], []
        for T in config.sample_seq_lens():
            for model in MODELS:
                curve = select(summary, "n_train", model=model, seq_len=T)
                sizes = [r["n_train"] for r in curve]
                n, how = smallest_n(sizes, [r["test_r2_mean"] for r in curve], target)
                first = find(rows, model=model, seq_len=T) or {}
                minimal.append({
                    "model": model, "model_name": model_name(model, config), "seq_len": T,
                    "width": first.get("width"), "steps": first.get("steps"),
                    "n_star": n, "how": how, "grid": sizes,
                    "r2_smallest_mean": curve[0]["test_r2_mean"],
                    "r2_largest_mean": curve[-1]["test_r2_mean"],
                    "r2_largest_sd": curve[-1]["test_r2_sd"],
                })
                for seed in config.seeds():
                    own = select(rows, "n_train", model=model, seq_len=T, seed=seed)
                    n_s, how_s = smallest_n([r["n_train"] for r in own],
                                            [r["test_r2"] for r in own], target)
                    per_seed.append({"model": model, "model_name": model_name(model, config),
                                     "seq_len": T, "seed": seed, "n_star": n_s, "how": how_s})
        growth = []
        for model in MODELS:
            found = [r for r in minimal if r["model"] == model and r["how"] == "interpolated"]
            lens = [r["seq_len"] for r in found]
            growth.append({"model": model, "model_name": model_name(model, config),
                           "over_seq_lens": lens,
                           "slope": loglog_slope(lens, [r["n_star"] for r in found])
                           if len(found) >= 2 else math.nan})
        return {"target_r2": target, "rows": rows, "summary": summary, "minimal": minimal,
                "minimal_per_seed": per_seed, "growth": growth}

    tables = {"sample_complexity.csv": "rows", "sample_complexity_summary.csv": "summary",
              "sample_complexity_minimal.csv": "minimal",
              "sample_complexity_per_seed.csv": "minimal_per_seed"}

    def summary(self, results):
        config, section = config_of(results), results[self.name]
        target = section["target_r2"]
        lines = [
            "Measured, beyond the paper (its theory says nothing about sample complexity): "
            f"the smallest number of training sequences whose held-out R^2 (mean over "
            f"{config.n_seeds} seeds) reaches {target}, from learning curves on "
            "nested subsets of one pool per seed. Every fit of a curve takes the same "
            f"optimisation steps (its model's training on {config.sample_budget} sequences; "
            "a StepBudget callback stops it), so a small set is not also a short "
            "optimisation. n* is interpolated linearly in log n between the grid points "
            "around the crossing; '<= n': the smallest size of the grid already reaches "
            "the target; '> n': no size does. Per seed in sample_complexity_per_seed.csv.", ""]
        rows = []
        for r in sorted(section["minimal"], key=lambda r: (MODELS.index(r["model"]),
                                                            r["seq_len"])):
            seeds = [s for s in section["minimal_per_seed"] if s["model"] == r["model"]
                     and s["seq_len"] == r["seq_len"]]
            rows.append([results["models"][r["model"]]["name"], str(r["seq_len"]),
                         str(r["width"]), str(r["steps"]),
                         shown(r["n_star"], r["how"], r["grid"]),
                         ", ".join(shown(s["n_star"], s["how"], r["grid"]) for s in seeds),
                         f"{r['r2_smallest_mean']:.3f}",
                         f"{r['r2_largest_mean']:.3f} ± {r['r2_largest_sd']:.3f}"])
        lines += markdown_table(
            ["model", "T", "width (FCN: m; transformers: d + pe_dim)", "steps",
             f"n* (R^2 {target})",
             "n* per seed", "R^2 at the smallest n", "R^2 at the largest n"], rows,
            ["l", "r", "r", "r", "r", "l", "r", "r"])
        return lines + ["", self.sentence(results)]

    def sentence(self, results):
        """How n* grows with T, per model, in words (measured)."""
        section = results[self.name]
        parts = []
        for model in MODELS:
            rows = select(section["minimal"], "seq_len", model=model)
            values = ", ".join(f"{shown(r['n_star'], r['how'], r['grid'])} at T={r['seq_len']}"
                               for r in rows)
            g = find(section["growth"], model=model)
            # NaN in memory, None in a results.json read back (strict JSON): no slope
            if g["slope"] is not None and math.isfinite(g["slope"]):
                trend = (f"log-log slope {g['slope']:.2f} over T = "
                         f"{', '.join(map(str, g['over_seq_lens']))}")
            elif all(r["how"] == "at or below the grid" for r in rows):
                trend = "no growth measurable: the smallest set of the grid reaches it at every T"
            else:
                trend = "no slope: n* was interpolated at fewer than two T"
            parts.append(f"{SHORT[model]}: n* {values} ({trend})")
        return ("Measured (beyond the paper): " + "; ".join(parts) + ".")

    def figures(self):
        return {"sample_complexity.png": plot_sample_complexity}


def plot_sample_complexity(results):
    """Held-out R^2 against training sequences, one panel per T; n* against T."""
    plt = pyplot()
    config, section = config_of(results), results["sample_complexity"]
    lens = sorted({r["seq_len"] for r in section["summary"]})
    fig, axes = plt.subplots(1, len(lens) + 1, figsize=(3.8 * (len(lens) + 1) + 1.2, 4.6),
                             layout="constrained")
    target = section["target_r2"]
    low = min(r["test_r2_mean"] - r["test_r2_sd"] for r in section["summary"])
    for ax, T in zip(axes, lens):
        for model in MODELS:
            rows = select(section["summary"], "n_train", model=model, seq_len=T)
            band(ax, [r["n_train"] for r in rows], rows, "test_r2", model=model,
                 label=results["models"][model]["name"], errorbars=True)
        ax.axhline(target, color="gray", linestyle="--", alpha=0.6)
        ax.set_xscale("log")
        # powers of two, every other one labelled where they would crowd
        sizes = sorted({r["n_train"] for r in section["summary"] if r["seq_len"] == T})
        powers_of_two_ticks(ax.xaxis, sizes)
        labels = ax.xaxis.get_ticklabels()
        step = max(1, math.ceil(len(labels) / 5))
        for i, label in enumerate(labels):
            label.set_visible(i % step == 0)
        ax.set(ylim=(max(-0.5, min(low, target) - 0.05), 1.02), title=f"T={T}",
               xlabel="training sequences n (same steps for every n)")
    axes[0].set_ylabel("held-out R^2")
    legend_below(fig, axes[0], ncol=3)
    ax = axes[-1]
    for model in MODELS:
        rows = select(section["minimal"], "seq_len", model=model)
        found = [r for r in rows if r["how"] != "not reached"]
        ax.plot([r["seq_len"] for r in found], [r["n_star"] for r in found],
                label=SHORT[model], **STYLES[model])
        below = [r for r in found if r["how"] == "at or below the grid"]
        ax.scatter([r["seq_len"] for r in below], [r["n_star"] for r in below], marker="v",
                   s=60, color=STYLES[model]["color"])
        missed = [r for r in rows if r["how"] == "not reached"]
        ax.scatter([r["seq_len"] for r in missed], [max(r["grid"]) for r in missed],
                   marker="^", s=60, color=STYLES[model]["color"])
    ax.set(xscale="log", yscale="log", xlabel="T", ylabel=f"n* (held-out R^2 {target})",
           title="n* against T\n(v: at or below the grid,\n^: beyond it)")
    ax.set_xticks(lens, [str(T) for T in lens])
    ax.minorticks_off()
    legend_beside(ax)
    fig.suptitle(f"Sample complexity, measured ({task_title(config)})", fontsize=9)
    return fig


EXPERIMENT = SampleComplexity()
