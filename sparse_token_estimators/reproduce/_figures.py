"""What the figures share: matplotlib on demand, one style per model, seed bands.

Each experiment draws its own figures from the results dict (its module's
``figures()``); ``save_figures`` writes all of them. matplotlib is imported
only when a figure is drawn, so the rest of the package works without the
``plots`` extra.
"""

import io
from pathlib import Path

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


def task_title(cfg):
    """``T=..., d=..., q=...; N seeds`` for a figure title."""
    return (f"T={cfg['seq_len']}, d={cfg['token_dim']}, q={cfg['n_selected']}; "
            f"mean ± sd over {cfg['n_seeds']} seeds")


def legend_beside(ax, **kwargs):
    """The legend of ``ax`` to its right, outside the data, where it hides no curve."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                     fontsize=MIN_FONT, **kwargs)


def legend_below(fig, ax, *, ncol=2):
    """The legend of ``ax`` below the whole figure (``layout="constrained"``).

    For the figures whose panels share one legend, or whose entries are too
    long to sit beside the data.
    """
    return fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=ncol,
                      fontsize=MIN_FONT)


def band(ax, x, rows, key, *, model, label, errorbars=False, **style):
    """Plot the mean of ``key`` over seeds against ``x`` with its spread.

    ``rows`` are summarised rows (``key_mean``, ``key_sd``); the spread is a
    shaded band of +- one standard deviation, or error bars.
    """
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


def powers_of_two_ticks(axis, values):
    """Plain-number ticks at the powers of two spanning ``values`` (log axis)."""
    from matplotlib.ticker import NullFormatter

    values = [v for v in values if v > 0]
    low, high = np.floor(np.log2(min(values))), np.ceil(np.log2(max(values)))
    ticks = [int(2 ** k) for k in np.arange(low, high + 1)]
    axis.set_ticks(ticks, [str(t) for t in ticks])
    axis.set_minor_formatter(NullFormatter())


def figure_names(results=None):
    """The file names ``save_figures`` writes, in order (for ``results``: of the
    experiments that ran)."""
    from ._registry import EXPERIMENTS

    return [name for experiment in EXPERIMENTS
            if results is None or experiment.name in results
            for name in experiment.figures()]


def draw_figures(results):
    """``(file name, matplotlib figure)`` of every experiment's figures, drawn one by one.

    The caller closes each figure (``save_figures`` saves and closes them).
    """
    from ._registry import EXPERIMENTS

    for experiment in (e for e in EXPERIMENTS if e.name in results):  # those that ran
        for name, draw in experiment.figures().items():
            yield name, draw(results)


def save_figures(results, out_dir, *, dpi=DPI):
    """Draw every experiment's figures into ``out_dir`` as PNG; returns their paths.

    Each file is written atomically (a temporary file renamed over its name).

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> with tempfile.TemporaryDirectory() as out:
    ...     names = [p.name for p in save_figures(run(SMOKE, progress=False), out)]
    >>> names[:3]
    ['width_separation.png', 'length_generalisation.png', 'length_vs_pe_dim.png']
    >>> names[3:5]
    ['alignment.png', 'width_scaling.png']
    >>> names[5:7]
    ['critical_widths.png', 'population.png']
    >>> names[7:]
    ['sample_complexity.png', 'encodings.png', 'architectures.png']
    """
    from ._records import write_atomic

    plt = pyplot()
    out = Path(out_dir)
    paths = []
    for name, fig in draw_figures(results):
        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=dpi)
        plt.close(fig)
        paths.append(write_atomic(out / name, image.getvalue()))
    return paths
