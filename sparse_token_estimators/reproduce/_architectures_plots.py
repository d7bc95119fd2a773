"""The architectures experiment's figures: smallest width against T and R^2 per length,
one panel per layout (``_architectures.Architectures.figures``)."""

from ..architectures import CELLS, ENCODER_ENCODINGS
from ._architectures_rows import LAYOUTS
from ._architectures_rows import in_layout as _in_layout
from ._architectures_rows import order as _order
from ._architectures_rows import present as _present
from ._architectures_rows import what as _what
from ._architectures_rows import widest as _widest
from ._architectures_rows import width as _width
from ._experiment import config_of, select
from ._figures import (
    MIN_FONT,
    R2_FLOOR,
    legend_below,
    length_axes,
    not_reached,
    pyplot,
    task_title,
)


def _base(model):
    return model.removeprefix("query_")


#: one marker per architecture (the same in both layouts): curves that coincide stay told apart
MARKERS = dict(zip((*(f"encoder_{e}" for e in ENCODER_ENCODINGS), *CELLS, "paper", "fcn",
                    "mamba"), "osv^D<>phX*Pd"))
#: one colour per architecture, the same in every panel, none of a reference line's (black:
#: T d and R^2 = 0; red: the FCN bound's width; gray: the best case, the training length)
COLORS = {"encoder_none": "tab:blue", "gru": "tab:green", "lstm": "tab:orange",
          "rnn": "tab:cyan", "encoder_stochastic": "tab:purple", "encoder_fixed": "tab:brown",
          "encoder_sinusoidal": "tab:pink", "encoder_learned": "tab:olive",
          "encoder_randomized": "navy", "encoder_rope": "goldenrod", "paper": "magenta",
          "fcn": "teal", "mamba": "crimson"}
#: octaves of T between the "not reached" markers of models that share a point
NOT_REACHED_SPREAD = 0.12


def _panels(layouts, size):
    """A figure with one panel of ``size`` (inches) per layout: ``(fig, [(ax, layout)])``."""
    fig, axes = pyplot().subplots(1, max(1, len(layouts)), layout="constrained",
                                  figsize=(size[0] * max(1, len(layouts)), size[1]),
                                  squeeze=False)
    return fig, list(zip(axes[0], layouts))


def plot_architectures(results):
    """Smallest width against T, one panel per layout, beside T d, the FCN bound's width
    and the paper's model's best case."""
    config, s = config_of(results), results["architectures"]
    fig, panels = _panels([lay for lay in LAYOUTS if _in_layout(s["critical"], lay)], (6.5, 6))
    lines = []  # the panels of several T
    for ax, lay in panels:
        rows = _in_layout(s["critical"], lay)
        one_T = len({r["seq_len"] for r in rows}) == 1
        (_width_bars if one_T else _width_lines)(ax, s, rows)
        ax.set_title(f"{lay.capitalize()} layout: smallest width with validation R^2 >= "
                     f"{s['target_r2']}", fontsize=MIN_FONT + 1)
        if one_T:  # the bars' tick labels take three lines: their legend sits below them
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2,
                      fontsize=MIN_FONT)
        else:
            lines.append(ax)
    if lines:
        # the line panels share most entries (T d, the bound, the marks), and two panels'
        # legends side by side are wider than the figure: one legend below it all
        legend_below(fig, *lines, ncol=3)
    spanned = [r["seq_len"] for r in s["critical"]]
    title = task_title(config, spanned, len(config.architecture_seeds()))
    fig.suptitle(f"More architectures (beyond the paper; {title})", fontsize=MIN_FONT + 2)
    return fig


def plot_lengths(results):
    """Held-out R^2 per test length at ``architecture_width``, one panel per layout."""
    config, s = config_of(results), results["architectures"]
    fig, panels = _panels([lay for lay in LAYOUTS if _present(s, lay)], (7, 6.2))
    for ax, lay in panels:
        for model in _present(s, lay):
            rows = select(s["lengths_summary"], "length", model=model)
            # drawn within the axes: a mean or band below their floor sits on it (a
            # curve below the axes would run under the legend)
            mean = [max(r["r2_mean"], R2_FLOOR) for r in rows]
            low = [m - max(r["r2_mean"] - r["r2_sd"], R2_FLOOR) for m, r in zip(mean, rows)]
            high = [max(r["r2_mean"] + r["r2_sd"], R2_FLOOR) - m for m, r in zip(mean, rows)]
            ax.errorbar([r["length"] for r in rows], mean, yerr=[low, high], capsize=2,
                        marker=MARKERS[_base(model)], markersize=4, color=COLORS[_base(model)],
                        label=_what(model),
                        linestyle="-" if "encoder_" in model else "--")
        length_axes(ax, config, _in_layout(s["lengths_summary"], lay),
                    title=f"{lay.capitalize()} layout: width {s['width']}, trained at T")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=MIN_FONT)
    fig.suptitle(f"More architectures per length (beyond the paper; "
                 f"{task_title(config, n_seeds=len(config.architecture_seeds()))})",
                 fontsize=MIN_FONT + 2)
    return fig


def _width_bars(ax, s, rows):
    """One T: a bar per searched model, T d and the FCN bound's width as lines."""
    # the value in the tick label, not over the bar: no reference line strikes it
    # a width found but not settled (the steps check moved the bracket) says its status
    # and its bar is hatched, as the lines figure circles it
    labels = [_what(r["model"]).replace("encoder, ", "encoder,\n") + "\n"
              + (f"{_width(r)}, {r['status']}" if _unsettled(r) else
                 f"{_width(r)}" if r["star"] else
                 f"unresolved at {_widest(r)}" if r["status"] == "unresolved" else
                 f"none up to {_widest(r)}")
              for r in rows]
    stars = [_width(r) or 0 for r in rows]
    td, bound = rows[0]["td"], rows[0]["fcn_bound_width"]
    bars = ax.bar(range(len(stars)), stars, color=[COLORS[_base(r["model"])] for r in rows])
    for bar, r in zip(bars, rows):
        if _unsettled(r):
            bar.set(hatch="//", edgecolor="white")
    ax.axhline(td, color="black", linestyle="--", label=f"T d = {td}")
    ax.axhline(bound, color="tab:red", linestyle=":",
               label=f"FCN bound's width for R^2 {s['target_r2']}")
    ax.set_xticks(range(len(stars)), labels)
    ax.set(ylim=(0, 1.1 * max([td, bound, *stars])),
           ylabel="smallest width (d_model, hidden_size, d + pe_dim, m)")


def _unsettled(row):
    """Whether a critical row found a width that the steps check did not settle."""
    return bool(row["star"]) and row["status"] != "found"


def _circle(ax, x, y, color, **kwargs):
    """Open circles at (``x``, ``y``): the widths figure's mark of an unresolved search."""
    ax.scatter(x, y, s=90, marker="o", facecolors="none", edgecolors=color, zorder=3, **kwargs)


def _width_lines(ax, s, rows):
    """Several T: each searched model's smallest width against T (log axes), beside T d,
    the FCN bound's width and d + pe_dim_best; a T not reached marked at the widest fit."""
    rows = sorted(rows, key=_order)
    lens = sorted({r["seq_len"] for r in rows})
    by_T = {r["seq_len"]: r for r in rows}
    ax.plot(lens, [by_T[T]["td"] for T in lens], color="black", linestyle="--", label="T d")
    ax.plot(lens, [by_T[T]["fcn_bound_width"] for T in lens], color="tab:red", linestyle=":",
            label=f"FCN bound's width for R^2 {s['target_r2']}")
    best = [(T, by_T[T]["best_case_width"]) for T in lens if by_T[T].get("best_case_width")]
    if best:
        ax.plot(*zip(*best), color="gray", linestyle="-.",
                label="d + pe_dim_best: the paper's model's best case (theory)")
    missed = [r for r in rows if not r["star"]]
    sharing = {}
    for r in missed:
        sharing.setdefault((r["seq_len"], _widest(r)), []).append(r["model"])
    for model in dict.fromkeys(r["model"] for r in rows):
        color = COLORS[_base(model)]
        found = [r for r in rows if r["model"] == model and r["star"]]
        ax.plot([r["seq_len"] for r in found], [_width(r) for r in found],
                marker=MARKERS[_base(model)], color=color, label=_what(model))
        unsettled = [r for r in found if _unsettled(r)]
        _circle(ax, [r["seq_len"] for r in unsettled], [_width(r) for r in unsettled], color)
        for r in (r for r in missed if r["model"] == model):
            point = (r["seq_len"], _widest(r))
            k, i = len(sharing[point]), sharing[point].index(model)
            x = point[0] * 2 ** (NOT_REACHED_SPREAD * (i - (k - 1) / 2))
            not_reached(ax, x, point[1], color=color, zorder=3)
            if r["status"] == "unresolved":  # reached at the stop with twice the steps
                _circle(ax, [x], [point[1]], color)
    if missed:
        not_reached(ax, [], [], color="gray",
                    label="not reached up to this width (colour: the model)")
    if any(r["status"] == "unresolved" or _unsettled(r) for r in rows):
        _circle(ax, [], [], "gray", label="circled: unresolved (the steps check moves the bracket)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lens, [str(T) for T in lens])
    ax.set(xlabel="sequence length T",
           ylabel="smallest width (d_model, hidden_size, d + pe_dim, m)")
