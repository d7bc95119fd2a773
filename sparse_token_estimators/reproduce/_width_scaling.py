"""Claim 4, width scaling: the FCN's width grows like T d, the transformer's pe_dim far slower.

For each T of the run, both models are fitted over their width grids (the
FCN's ``hidden_width`` around T d, the paper's model's ``pe_dim``), on a
training set that grows in proportion to T. The smallest width whose mean
validation R^2 reaches ``target_r2`` is chosen on the validation set; its
R^2 is reported on the held-out set. Growth is judged over every T of the
run by least-squares slopes of log width against log T, with an allowance
``delta = log(g) / log(T_max / T_min)`` for a grid whose values step by a
factor g (a minimum read off such a grid can be off by up to one step):

- FCN width scaling: the FCN's smallest width grows like T d (slope 1): at
  every step from one T to the next it does not shrink, and its slope is
  >= 1 - delta;
- transformer width scaling: the paper's model's smallest pe_dim grows at
  most like q log T: its slope is at most that of q log T over the same T
  (about 1 / log T, 0.3-0.5 here) plus delta, and at every T its width
  d + pe_dim is below the FCN's.

The two are separate claims: they can fail apart. The one-draw model's
pe_dim at a fixed R^2 grows faster than q log T while T is a small multiple
of q (log((T - q) / q), which sets how many positions can crowd out the
selected ones, is far from log T there).

That no FCN reaches the target below the width the bound allows (the
smallest m with ``1 - fcn_lower_bound(T, q, d, m) / (d / q) >= target``) is
guaranteed, and is reported as a sanity check.
"""

import math

import numpy as np

from ..theory import fcn_lower_bound, transformer_pe_scale, zero_predictor_loss
from ._experiment import (
    Experiment,
    claim,
    fmt,
    loglog_slope,
    markdown_table,
    summarise,
)
from ._figures import STYLES, legend_beside, powers_of_two_ticks, pyplot, task_title
from ._fits import Fit, model_name

MODELS = {"fcn": "hidden_width", "paper": "pe_dim"}


def bound_width(seq_len, token_dim, n_selected, target):
    """Smallest FCN width whose R^2 ceiling (from the width-aware bound) reaches ``target``.

    Examples
    --------
    >>> bound_width(10, 8, 3, 0.8)
    60
    """
    zero = zero_predictor_loss(token_dim, n_selected)
    for m in range(1, seq_len * token_dim + 1):
        if 1 - fcn_lower_bound(seq_len, n_selected, token_dim=token_dim, width=m) / zero \
                >= target:
            return m
    return seq_len * token_dim


def _smallest(points):
    """The point of smallest ``value`` (a width) among those reaching the target."""
    return min(points, key=lambda r: r["value"]) if points else None


def _grid_step(values):
    values = sorted(set(values))
    return max((b / a for a, b in zip(values, values[1:])), default=2.0)


class WidthScaling(Experiment):
    name = "width_scaling"
    title = "Width scaling (smallest width reaching the target R^2)"
    thresholds = {}

    def fits(self, config):
        return [Fit(model, w, T) for T in config.scaling_seq_lens()
                for model, grid in (("fcn", config.fcn_widths(T)),
                                    ("paper", config.scaling_pe_dims))
                for w in grid]

    def collect(self, config, records):
        points = []
        for fit in sorted(self.fits(config)):
            for seed in config.seeds():
                r = records[fit, seed]
                points.append({"seq_len": fit.seq_len, "model": fit.model,
                               "model_name": r["model_name"], "parameter": MODELS[fit.model],
                               "value": fit.width, "width": r["width"], "seed": seed,
                               "n_train": r["n_train"], "val_r2": r["val_r2"],
                               "test_r2": r["test_r2"], "test_loss": r["test_loss"]})
        summary = summarise(points, ["seq_len", "model", "model_name", "value"],
                            ["val_r2", "test_r2", "test_loss"])
        target = config.target_r2
        minimal, per_seed = [], []
        for T in config.scaling_seq_lens():
            for model, param in MODELS.items():
                grid = [r for r in summary if r["seq_len"] == T and r["model"] == model]
                chosen = _smallest([r for r in grid if r["val_r2_mean"] >= target])
                minimal.append({
                    "seq_len": T, "model": model, "model_name": model_name(model, config),
                    "parameter": param,
                    "minimal": chosen["value"] if chosen else None,
                    "test_r2_mean": chosen["test_r2_mean"] if chosen else None,
                    "test_r2_sd": chosen["test_r2_sd"] if chosen else None,
                    "grid_max": max(r["value"] for r in grid),
                    "grid_step": _grid_step([r["value"] for r in grid]),
                    "td": T * config.token_dim,
                    "bound_width": bound_width(T, config.token_dim, config.n_selected, target),
                    "q_log_t": transformer_pe_scale(T, config.n_selected),
                })
                for seed in config.seeds():
                    own = [r for r in points if r["seq_len"] == T and r["model"] == model
                           and r["seed"] == seed and r["val_r2"] >= target]
                    pick = _smallest(own)
                    per_seed.append({"seq_len": T, "model": model,
                                     "model_name": model_name(model, config), "seed": seed,
                                     "minimal": pick["value"] if pick else None,
                                     "test_r2": pick["test_r2"] if pick else None})
        return {"target_r2": target, "points": points, "summary": summary,
                "minimal": minimal, "minimal_per_seed": per_seed}

    def claims(self, results, thresholds):
        cfg, section, names = results["config"], results[self.name], results["models"]
        d = cfg["token_dim"]
        rows = {(r["seq_len"], r["model"]): r for r in section["minimal"]}
        lens = sorted({r["seq_len"] for r in section["minimal"]})
        span = math.log(lens[-1] / lens[0])
        allowance = {m: math.log(max(rows[T, m]["grid_step"] for T in lens)) / span
                     for m in MODELS}
        reference = loglog_slope(lens, [rows[T, "paper"]["q_log_t"] for T in lens])

        def fcn_widths(found):
            # Not reached: beyond the grid, taken as twice its largest value.
            # At the largest T that is a lower bound of the width (the slope
            # can only be steeper); at any other T the widths then shrink to
            # the next T, which fails the claim: the substitute cannot pass it.
            return [found[T, "fcn"] or 2 * rows[T, "fcn"]["grid_max"] for T in lens]

        def fcn_verdict(found):
            widths = fcn_widths(found)
            slope = loglog_slope(lens, widths)
            return (all(b >= a for a, b in zip(widths, widths[1:]))
                    and slope >= 1 - allowance["fcn"]), slope

        def pe_verdict(found):
            pe = [found[T, "paper"] for T in lens]
            if any(p is None for p in pe):
                return False, math.nan
            slope = loglog_slope(lens, pe)
            narrower = all(d + p < m for p, m in zip(pe, fcn_widths(found)))
            return slope <= reference + allowance["paper"] and narrower, slope

        mean = {key: r["minimal"] for key, r in rows.items()}
        seeds = sorted({r["seed"] for r in section["minimal_per_seed"]})
        own = [{(r["seq_len"], r["model"]): r["minimal"]
                for r in section["minimal_per_seed"] if r["seed"] == s} for s in seeds]

        def shown(T, model):
            r = rows[T, model]
            return str(r["minimal"]) if r["minimal"] is not None else f"> {r['grid_max']}"

        def width(T):
            p = rows[T, "paper"]["minimal"]
            return "-" if p is None else d + p

        fcn_ok, fcn_slope = fcn_verdict(mean)
        pe_ok, pe_slope = pe_verdict(mean)
        over = f"Over T = {', '.join(map(str, lens))}, the smallest width whose validation " \
               f"R^2 reaches {section['target_r2']} (mean over seeds)"
        guaranteed = all(rows[T, "fcn"]["minimal"] is None
                         or rows[T, "fcn"]["minimal"] >= rows[T, "fcn"]["bound_width"]
                         for T in lens)
        check = ("no FCN reaches the target below the width its bound allows ("
                 + ", ".join(f"T={T}: {rows[T, 'fcn']['bound_width']}" for T in lens) + ")",
                 guaranteed)
        return [
            claim(
                "FCN width scaling", model=names["fcn"]["name"],
                statement=(
                    f"{over} grows like T*d for the FCN: it never shrinks from one T to "
                    f"the next, and its log-log slope against T is at least 1 - "
                    f"{allowance['fcn']:.2f} (T*d has slope 1; the allowance is one step "
                    "of the width grid over the range of T)."
                ),
                supported=fcn_ok, seeds_supporting=sum(fcn_verdict(o)[0] for o in own),
                n_seeds=len(seeds),
                evidence=", ".join(f"T={T}: {shown(T, 'fcn')} (T*d={T * d})" for T in lens)
                + f"; slope {fcn_slope:.2f}"
                + "".join(f" (taking > {rows[T, 'fcn']['grid_max']} as "
                          f"{2 * rows[T, 'fcn']['grid_max']})"
                          for T in lens if rows[T, "fcn"]["minimal"] is None),
                checks=[check],
            ),
            claim(
                "transformer width scaling", model=names["paper"]["name"],
                statement=(
                    f"{over} grows at most like q log T for the paper's transformer: the "
                    f"log-log slope of pe_dim against T is at most {reference:.2f} (that "
                    f"of q log T over these T) + {allowance['paper']:.2f} (one step of the "
                    "pe_dim grid), and its width d + pe_dim is below the FCN's at every T."
                ),
                supported=pe_ok, seeds_supporting=sum(pe_verdict(o)[0] for o in own),
                n_seeds=len(seeds),
                evidence=", ".join(f"T={T}: pe_dim {shown(T, 'paper')} (q log T="
                                   f"{rows[T, 'paper']['q_log_t']:.1f}; width "
                                   f"{width(T)} vs the FCN's {shown(T, 'fcn')})" for T in lens)
                + f"; slope {fmt(pe_slope, '.2f')}",
            ),
        ]

    def tables(self, results):
        section = results[self.name]
        return {"width_scaling_points.csv": section["points"],
                "width_scaling.csv": section["minimal"],
                "width_scaling_per_seed.csv": section["minimal_per_seed"]}

    def summary(self, results):
        cfg, section = results["config"], results[self.name]
        rows = {(r["seq_len"], r["model"]): r for r in section["minimal"]}
        out = []
        for T in sorted({r["seq_len"] for r in section["minimal"]}):
            f, p = rows[T, "fcn"], rows[T, "paper"]

            def cell(r):
                if r["minimal"] is None:
                    return f"> {r['grid_max']}", "-"
                return str(r["minimal"]), f"{r['test_r2_mean']:.3f} ± {r['test_r2_sd']:.3f}"

            out.append([str(T), *cell(f), str(f["td"]), str(f["bound_width"]), *cell(p),
                        f"{p['q_log_t']:.1f}"])
        lines = [f"Smallest width whose validation R^2 (mean over {cfg['n_seeds']} seeds) "
                 f"reaches {section['target_r2']}, with its held-out R^2; the FCN bound "
                 "allows no narrower FCN than the 'bound' column.", ""]
        return lines + markdown_table(
            ["T", "FCN width", "held-out R^2", "T*d", "bound", "pe_dim (paper's model)",
             "held-out R^2", "q log T"], out)

    def figures(self):
        return {"width_scaling.png": plot_width_scaling}


def plot_width_scaling(results):
    """Smallest width reaching the target against T, beside T d and d + q log T.
    """
    plt = pyplot()
    cfg, section = results["config"], results["width_scaling"]
    d, q = cfg["token_dim"], cfg["n_selected"]
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    plotted = []
    for model, offset in (("fcn", 0), ("paper", d)):
        style = STYLES[model]
        rows = sorted((r for r in section["minimal"] if r["model"] == model),
                      key=lambda r: r["seq_len"])
        found = [r for r in rows if r["minimal"] is not None]
        ax.plot([r["seq_len"] for r in found], [offset + r["minimal"] for r in found],
                label=results["models"][model]["name"], **style)
        seeds = [r for r in section["minimal_per_seed"]
                 if r["model"] == model and r["minimal"] is not None]
        ax.scatter([r["seq_len"] for r in seeds], [offset + r["minimal"] for r in seeds],
                   s=12, color=style["color"], alpha=0.4, label="... each seed")
        missed = [r for r in rows if r["minimal"] is None]
        if missed:
            ax.scatter([r["seq_len"] for r in missed], [offset + r["grid_max"] for r in missed],
                       marker="^", color=style["color"], label="... not reached in its grid")
        plotted += [offset + (r["minimal"] or r["grid_max"]) for r in rows]
    lengths = sorted({r["seq_len"] for r in section["minimal"]})
    ts = np.linspace(lengths[0], lengths[-1], 50)
    ax.plot(ts, ts * d, color=STYLES["fcn"]["color"], linestyle="--", alpha=0.6, label="T*d")
    bound = [r["bound_width"] for r in sorted(
        (r for r in section["minimal"] if r["model"] == "fcn"), key=lambda r: r["seq_len"])]
    ax.plot(lengths, bound, color=STYLES["fcn"]["color"], linestyle=":", alpha=0.6,
            label="narrowest FCN the bound allows")
    ax.plot(ts, d + q * np.log(ts), color=STYLES["paper"]["color"], linestyle="--",
            alpha=0.6, label="d + q log T")
    ax.set_yscale("log")
    powers_of_two_ticks(ax.yaxis, plotted + [d + q * np.log(lengths[0]), lengths[-1] * d])
    ax.set_xticks(lengths)
    ax.set(xlabel="sequence length T", ylabel="smallest width (FCN: m; transformer: d + pe_dim)",
           title=f"Smallest width whose validation R^2 reaches {section['target_r2']}"
                 f"\n({task_title(cfg)})")
    legend_beside(ax)
    return fig


EXPERIMENT = WidthScaling()
