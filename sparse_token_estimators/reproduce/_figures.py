"""What the figures share: matplotlib on demand (the ``plots`` extra), one style per model,
seed bands, axes."""

import numpy as np

#: the resolution figures are saved at (dots per inch); shown at 96 pixels per
#: inch (a browser at 100 %), a font of s points there reads as s * DPI / 96
DPI = 100

#: the smallest font, in points, of any text in a figure: legend and tick
#: labels read as 8 points at the saved size (8 * 96 / DPI rounded up)
MIN_FONT = 8

#: the models' names in table headers and short legends
SHORT = {"fcn": "FCN", "paper": "paper's model", "ensemble": "ensemble (ext.)"}

#: one colour and marker per model, in every figure
STYLES = {
    "fcn": {"color": "tab:red", "marker": "s"},
    "paper": {"color": "tab:blue", "marker": "o"},
    "ensemble": {"color": "tab:green", "marker": "D"},
    "fixed": {"color": "tab:orange", "marker": "^"},
}


def pyplot():
    """matplotlib.pyplot with a non-interactive backend, or an ImportError saying how to get it."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "Plotting needs matplotlib: from the package's clone, pip install -e '.[plots]'"
        ) from exc
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def task_title(config, seq_lens=None, n_seeds=None):
    """``T=..., d=..., q=...; N seeds`` for a figure title; with ``seq_lens``, the lengths
    the figure spans (``T=8..64`` when several), not the configuration's one T; ``n_seeds``:
    the seeds of the figure's fits where fewer than the run's (the architectures')."""
    lens = sorted(set(seq_lens or ())) or [config.seq_len]
    T = f"T={lens[0]}" if len(lens) == 1 else f"T={lens[0]}..{lens[-1]}"
    n = n_seeds or config.n_seeds
    seeds = (f"mean ± sd over {n} seeds" if n > 1 else "1 seed") + (
        f" of the run's {config.n_seeds}" if n < config.n_seeds else "")
    return f"{T}, d={config.token_dim}, q={config.n_selected}; {seeds}"


def legend_beside(ax, **kwargs):
    """The legend of ``ax`` to its right, outside the data, where it hides no curve."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                     fontsize=MIN_FONT, **kwargs)


def legend_below(fig, *axes, ncol=2):
    """One legend of ``axes`` below the whole figure (``layout="constrained"``), each label
    once (panels that share entries list them once)."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return fig.legend(list(entries.values()), list(entries), loc="outside lower center",
                      ncol=ncol, fontsize=MIN_FONT)


def legend_or_note(ax, legend):
    """``legend(ax)``, or where nothing was plotted a note that no critical width was found."""
    if ax.get_legend_handles_labels()[0]:
        legend(ax)
    else:
        ax.text(0.5, 0.5, "no critical width found in this run", ha="center",
                transform=ax.transAxes)


def band(ax, x, rows, key, *, model, label, errorbars=False, **style):
    """Plot the mean of ``key`` over seeds (summarised ``rows``) against ``x``, with a
    band of +- one standard deviation, or error bars."""
    style = {**STYLES.get(model, {}), **style}
    mean = np.array([r[f"{key}_mean"] for r in rows])
    sd = np.array([r[f"{key}_sd"] for r in rows])
    if errorbars:
        ax.errorbar(x, mean, yerr=sd, label=label, capsize=3, markersize=4, **style)
    else:
        marker = style.pop("marker", None)
        ax.plot(x, mean, label=label, marker=marker, markersize=3, **style)
        ax.fill_between(x, mean - sd, mean + sd, color=style.get("color"), alpha=0.2,
                        linewidth=0)


def found_with_bracket(ax, x, rows, offset=0, **style):
    """The widths found (critical ``rows`` with one, plus ``offset``) against ``x``, each
    with a bar down to its bracket's lower end; returns those widths."""
    star = np.array([offset + r["star"] for r in rows], dtype=float)
    low = np.array([offset + (r["lower"] or r["star"]) for r in rows], dtype=float)
    ax.errorbar(x, star, yerr=[star - low, np.zeros_like(star)], capsize=3, **style)
    return star


def settled(row):
    """Whether the steps check settled a critical row's width (rows from before the fourth
    set record no ``settled``: their status says it)."""
    return row.get("settled", row["status"] in ("found", "at start", "> stop"))


def unsettled_marks(ax, x, rows, offset=0, *, color, marker="o", label=None):
    """Open markers over the widths found (critical ``rows`` with one, plus ``offset``,
    against ``x``) that the steps check did not settle, drawn over
    :func:`found_with_bracket`'s filled ones; nothing where every width is settled.
    Whether it drew any."""
    points = [(xi, offset + r["star"]) for xi, r in zip(x, rows) if not settled(r)]
    if points:
        ax.scatter(*zip(*points), marker=marker, s=42, facecolors="white", edgecolors=color,
                   linewidths=1.5, zorder=3, label=label)
    return bool(points)


def unsettled_entry(ax, label="open: a width the steps check did not settle"):
    """One legend entry (a grey open circle) for the open markers of several models."""
    ax.scatter([], [], marker="o", s=42, facecolors="white", edgecolors="gray",
               linewidths=1.5, label=label)


def not_reached(ax, x, y, **style):
    """Triangles at (T, the widest width fitted) where a search did not reach the target."""
    ax.scatter(x, y, marker="^", s=50, **style)


def powers_of_two_ticks(axis, values):
    """Plain-number ticks at the powers of two spanning ``values`` (log axis)."""
    from matplotlib.ticker import NullFormatter

    values = [v for v in values if v > 0]
    low, high = np.floor(np.log2(min(values))), np.ceil(np.log2(max(values)))
    ticks = [int(2 ** k) for k in np.arange(low, high + 1)]
    axis.set_ticks(ticks, [str(t) for t in ticks])
    axis.set_minor_formatter(NullFormatter())


#: the lowest held-out R^2 the length axes show (below: a model worse than predicting 0
#: twice over; nothing to read there but that)
R2_FLOOR = -1.0


def length_axes(ax, config, summary, title):
    """Held-out R^2 against test length: the training length T marked, the
    named lengths (1T, 2T, ...) as ticks, the y range from the rows' bands."""
    T = config.seq_len
    # named in the legend: a label on the plot would sit on the curves
    ax.axvline(T, color="gray", alpha=0.5, label="training length T")
    ax.axhline(0, color="black", linewidth=0.5)
    lengths = [T * f for f in config.length_factors]
    ax.set_xticks(lengths, [f"{L}\n({f}T)" for L, f in zip(lengths, config.length_factors)])
    low = min(r["r2_mean"] - r["r2_sd"] for r in summary)
    ax.set(ylim=(max(min(-0.05, low - 0.05), R2_FLOOR), 1.02), xlabel="test sequence length",
           ylabel="held-out R^2", title=title)
