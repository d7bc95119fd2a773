"""What the figures share: matplotlib on demand, one style per model, seed bands.

Each experiment draws its own figures from the results dict (its module's
``figures()``); ``save_figures`` writes all of them. matplotlib is imported
only when a figure is drawn, so the rest of the package works without the
``plots`` extra.
"""

from pathlib import Path

import numpy as np

#: one colour and marker per model, in every figure
#: the models' names in table headers and short legends
SHORT = {"fcn": "FCN", "paper": "paper's model", "ensemble": "ensemble (ext.)"}

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
            "Plotting needs matplotlib: pip install 'sparse-token-estimators[plots]'"
        ) from exc
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def task_title(cfg):
    """``T=..., d=..., q=...; N seeds`` for a figure title."""
    return (f"T={cfg['seq_len']}, d={cfg['token_dim']}, q={cfg['n_selected']}; "
            f"mean ± sd over {cfg['n_seeds']} seeds")


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


def save_figures(results, out_dir, *, dpi=90):
    """Draw every experiment's figures into ``out_dir`` as PNG; returns their paths.

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
    ['sample_complexity.png', 'encodings.png']
    """
    from ._registry import EXPERIMENTS

    plt = pyplot()
    out = Path(out_dir)
    paths = []
    for experiment in (e for e in EXPERIMENTS if e.name in results):
        for name, draw in experiment.figures().items():
            fig = draw(results)
            fig.savefig(out / name, dpi=dpi)
            plt.close(fig)
            paths.append(out / name)
    return paths
