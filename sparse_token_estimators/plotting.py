"""Figures of the reproduction, drawn from the results dict of ``reproduce.run``.

matplotlib is imported only when a figure is drawn, so the rest of the
package works without the ``plots`` extra.
"""

from pathlib import Path

import numpy as np

FCN_STYLE = {"color": "tab:red", "marker": "s", "label": "FCN (width m)"}
TRANSFORMER_STYLE = {"color": "tab:blue", "marker": "o",
                     "label": "transformer (width d + pe_dim)"}
ENCODING_STYLE = {"stochastic": {"color": "tab:blue", "marker": "o"},
                  "fixed": {"color": "tab:orange", "marker": "^"}}


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(
            "Plotting needs matplotlib: pip install 'sparse-token-estimators[plots]'"
        ) from exc
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _powers_of_two_ticks(axis, values):
    """Plain-number ticks at the powers of two spanning ``values`` (log axis)."""
    from matplotlib.ticker import NullFormatter

    low, high = np.floor(np.log2(min(values))), np.ceil(np.log2(max(values)))
    ticks = [int(2 ** k) for k in np.arange(low, high + 1)]
    axis.set_ticks(ticks, [str(t) for t in ticks])
    axis.set_minor_formatter(NullFormatter())


def _task_title(cfg):
    return f"T={cfg['seq_len']}, d={cfg['token_dim']}, q={cfg['n_selected']}"


def plot_width_separation(results):
    """Held-out loss against width for both models, with the FCN lower bound.

    Examples
    --------
    >>> from sparse_token_estimators.plotting import plot_width_separation
    >>> results = {"config": {"seq_len": 4, "token_dim": 2, "n_selected": 2},
    ...            "theory": {"fcn_lower_bound": 0.08, "zero_predictor_loss": 1.0,
    ...                       "uniform_attention_loss": 0.5, "fcn_width_threshold": 8},
    ...            "width_separation": [
    ...                {"model": "fcn", "width": 4, "test_loss": 0.6, "train_loss": 0.5},
    ...                {"model": "transformer", "width": 4, "test_loss": 0.1,
    ...                 "train_loss": 0.1}]}
    >>> fig = plot_width_separation(results)
    >>> fig.axes[0].get_xlabel()
    'width'
    >>> _pyplot().close(fig)
    """
    plt = _pyplot()
    cfg, theory = results["config"], results["theory"]
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for model, style in (("fcn", FCN_STYLE), ("transformer", TRANSFORMER_STYLE)):
        rows = sorted((r for r in results["width_separation"] if r["model"] == model),
                      key=lambda r: r["width"])
        widths = [r["width"] for r in rows]
        ax.plot(widths, [r["test_loss"] for r in rows], **style)
        ax.plot(widths, [r["train_loss"] for r in rows], color=style["color"],
                linestyle=":", alpha=0.6)
    all_widths = [r["width"] for r in results["width_separation"]]
    threshold = theory["fcn_width_threshold"]
    ax.axvline(threshold, color="gray", linestyle="-", alpha=0.5)
    ax.text(threshold, theory["zero_predictor_loss"], " T*d", va="top", color="gray")
    ax.hlines(theory["fcn_lower_bound"], min(all_widths), threshold - 1, color="tab:red",
              linestyle="--", label="FCN lower bound (m < T*d)")
    ax.axhline(theory["zero_predictor_loss"], color="black", linestyle="--", alpha=0.4,
               label="predict 0")
    ax.axhline(theory["uniform_attention_loss"], color="black", linestyle=":", alpha=0.4,
               label="uniform attention")
    ax.set(xscale="log", yscale="log")
    _powers_of_two_ticks(ax.xaxis, all_widths)
    ax.set(xlabel="width", ylabel="held-out loss (dotted: training)",
           title=f"Width separation ({_task_title(cfg)})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def plot_length_generalisation(results):
    """Held-out R^2 against test length for the two positional encodings."""
    plt = _pyplot()
    cfg = results["config"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for enc, style in ENCODING_STYLE.items():
        rows = sorted((r for r in results["length_generalisation"] if r["encoding"] == enc),
                      key=lambda r: r["seq_len"])
        ax.plot([r["seq_len"] for r in rows], [r["test_r2"] for r in rows],
                label=f"{enc} PE", **style)
    ax.axvline(cfg["seq_len"], color="gray", alpha=0.5)
    ax.axhline(0, color="black", linewidth=0.5)
    lengths = [cfg["seq_len"] * f for f in cfg["length_factors"]]
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{L}\n({f}T)" for L, f in zip(lengths, cfg["length_factors"])])
    low = min(-0.05, min(r["test_r2"] for r in results["length_generalisation"]) - 0.05)
    ax.set(ylim=(max(low, -1.0), 1.02), xlabel="test sequence length",
           ylabel="held-out R^2",
           title=f"Length generalisation (trained at T={cfg['seq_len']}, "
                 f"pe_dim={cfg['length_pe_dim']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_alignment(results):
    """Alignment of W with the identity, and its scale <W, I>/d_p, over epochs."""
    plt = _pyplot()
    cfg = results["config"]
    fig, (ax, ax_scale) = plt.subplots(1, 2, figsize=(8, 3.4))
    for enc, style in ENCODING_STYLE.items():
        rows = [r for r in results["alignment"] if r["encoding"] == enc]
        epochs = [r["epoch"] for r in rows]
        ax.plot(epochs, [r["alignment"] for r in rows], label=f"{enc} PE", **style,
                markersize=3)
        ax_scale.plot(epochs, [r["w_scale"] for r in rows], **style, markersize=3)
    ax.axhline(1, color="black", linestyle="--", alpha=0.4)
    ax.set(ylim=(min(0, ax.get_ylim()[0]), 1.05), xlabel="epoch",
           ylabel="<W, I> / (|W|_F sqrt(d_p))", title="Alignment of W with I")
    ax_scale.set(xlabel="epoch", ylabel="<W, I> / d_p", title="Scale c of W ~ c I")
    ax.legend(fontsize=8)
    fig.suptitle(f"{_task_title(cfg)}, pe_dim={cfg['length_pe_dim']}", fontsize=9)
    fig.tight_layout()
    return fig


def plot_width_scaling(results):
    """Smallest width reaching the target R^2 against T, beside T*d and d + q log T.

    The FCN's width is m, the transformer's d + pe_dim. A width its grid
    never reached is drawn at the grid's largest value as an upward triangle.
    """
    plt = _pyplot()
    cfg, scaling = results["config"], results["width_scaling"]
    d, q = cfg["token_dim"], cfg["n_selected"]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    plotted = []
    for model, offset, style in (("fcn", 0, FCN_STYLE), ("transformer", d, TRANSFORMER_STYLE)):
        rows = sorted((r for r in scaling["minimal"] if r["model"] == model),
                      key=lambda r: r["seq_len"])
        found = [r for r in rows if r["minimal_width"] is not None]
        missed = [r for r in rows if r["minimal_width"] is None]
        ax.plot([r["seq_len"] for r in found], [offset + r["minimal_width"] for r in found],
                **style)
        if missed:
            ax.scatter([r["seq_len"] for r in missed], [offset + r["grid_max"] for r in missed],
                       marker="^", color=style["color"],
                       label=f"{style['label'].split(' (')[0]}: not reached within its grid")
        plotted += [offset + (r["minimal_width"] or r["grid_max"]) for r in rows]
    lengths = sorted({r["seq_len"] for r in scaling["minimal"]})
    ts = np.linspace(lengths[0], lengths[-1], 50)
    ax.plot(ts, ts * d, color=FCN_STYLE["color"], linestyle="--", alpha=0.6, label="T*d")
    ax.plot(ts, d + q * np.log(ts), color=TRANSFORMER_STYLE["color"], linestyle="--",
            alpha=0.6, label="d + q log T")
    ax.set_yscale("log")
    _powers_of_two_ticks(ax.yaxis, plotted + [d + q * np.log(lengths[0]), lengths[-1] * d])
    ax.set_xticks(lengths)
    ax.set(xlabel="sequence length T", ylabel="smallest width",
           title=f"Width reaching held-out R^2 >= {scaling['target_r2']} (d={d}, q={q})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


#: file name -> the function drawing it
FIGURES = {
    "width_separation.png": plot_width_separation,
    "length_generalisation.png": plot_length_generalisation,
    "alignment.png": plot_alignment,
    "width_scaling.png": plot_width_scaling,
}


def save_figures(results, out_dir, *, dpi=90):
    """Draw the four figures into ``out_dir`` as PNG; returns their paths.

    Each ``plot_*`` function draws one of them from the same results dict
    and returns the matplotlib Figure.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> with tempfile.TemporaryDirectory() as out:
    ...     [p.name for p in save_figures(run(SMOKE, progress=False), out)]
    ['width_separation.png', 'length_generalisation.png', 'alignment.png', 'width_scaling.png']
    """
    plt = _pyplot()
    out = Path(out_dir)
    paths = []
    for name, draw in FIGURES.items():
        fig = draw(results)
        fig.savefig(out / name, dpi=dpi)
        plt.close(fig)
        paths.append(out / name)
    return paths
