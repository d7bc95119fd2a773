"""Every figure of a run reads at a glance: no text on other text, legends that hide no
curve, no label struck by a line, no curve hidden under another drawn alike, text of at
least 8 points at the saved size.

The figures are those ``save_figures`` writes (``draw_figures``), whatever the
experiments draw; the check is geometric, on the boxes matplotlib lays out.
"""

import itertools

import numpy as np
import pytest

from sparse_token_estimators.reproduce._figures import DPI
from sparse_token_estimators.reproduce._report import draw_figures

plt = pytest.importorskip("matplotlib.pyplot")

#: the smallest font at the saved size, in points (shown at 96 pixels per inch)
SMALLEST = 8


def _visible(artist):
    return artist.get_visible() and (not hasattr(artist, "get_text") or artist.get_text())


def _texts(fig):
    """``(what, Text)`` of every title, axis and tick label and free text."""
    out = [("suptitle", fig._suptitle)] if fig._suptitle is not None else []
    out += [("figure text", t) for t in fig.texts if t is not fig._suptitle]
    for i, ax in _all_axes(fig):
        for title in (ax.title, ax._left_title, ax._right_title):
            out.append((f"axes {i} title", title))
        out += [(f"axes {i} x label", ax.xaxis.label), (f"axes {i} y label", ax.yaxis.label)]
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            low, high = sorted(axis.get_view_interval())
            # the labels drawn: of the ticks within the axes' range
            out += [(f"axes {i} {name} tick label {tick.label1.get_text()!r}", label)
                    for tick in (*axis.get_major_ticks(), *axis.get_minor_ticks())
                    if low <= tick.get_loc() <= high
                    for label in (tick.label1, tick.label2) if label.get_visible()]
        out += [(f"axes {i} text {t.get_text()!r}", t) for t in ax.texts]
    return [(what, t) for what, t in out if _visible(t)]


def _all_axes(fig):
    """``(name, axes)`` of every axes, secondary axes (``child_axes``) included."""
    out = []
    for i, ax in enumerate(fig.axes):
        out += [(str(i), ax)] + [(f"{i}.{j}", child) for j, child in enumerate(ax.child_axes)]
    return out


def _legends(fig):
    legends = [("figure legend", leg) for leg in fig.legends]
    legends += [(f"axes {i} legend", ax.get_legend()) for i, ax in enumerate(fig.axes)
                if ax.get_legend() is not None]
    return legends


def _curves(ax):
    """Display paths of the axes' lines (curves, reference lines, error bars)."""
    return [(line.get_label(), line.get_path().transformed(line.get_transform()))
            for line in ax.lines if line.get_visible() and len(line.get_xydata()) > 1]


def _labelled(ax):
    return [line for line in ax.lines if line.get_visible()
            and not line.get_label().startswith("_") and len(line.get_xydata()) > 1]


def _style(line):
    """What tells two curves apart where they coincide (colour does not: one hides the other)."""
    hollow = str(line.get_markerfacecolor()).lower() == "none"
    return line.get_linestyle(), line.get_marker() or "None", hollow


def _coincide(a, b, pixels=3.0):
    """Whether ``a`` and ``b`` pass within ``pixels`` of each other at every x they share."""
    pa = a.get_transform().transform(a.get_xydata())
    pb = b.get_transform().transform(b.get_xydata())
    xs = sorted(set(np.round(pa[:, 0], 1)) & set(np.round(pb[:, 0], 1)))
    if len(xs) < 2:
        return False
    ya = dict(zip(np.round(pa[:, 0], 1), pa[:, 1]))
    yb = dict(zip(np.round(pb[:, 0], 1), pb[:, 1]))
    return all(abs(ya[x] - yb[x]) < pixels for x in xs)


def _problems(fig):
    fig.set_dpi(DPI)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)  # lay the figure out as savefig does
    boxes = [(what, t.get_window_extent(renderer)) for what, t in _texts(fig)]
    boxes += [(what, leg.get_window_extent(renderer)) for what, leg in _legends(fig)]
    problems = []
    page = fig.bbox
    for what, box in boxes:  # nothing cut off at the figure's edges
        if box.width and (box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1
                          or box.x1 > page.x1 + 1 or box.y1 > page.y1 + 1):
            problems.append(f"{what} runs off the figure")
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        if box_a.width and box_b.width and box_a.overlaps(box_b):
            problems.append(f"{a} overlaps {b}")
    for what, text in _texts(fig):
        size = text.get_fontsize() * DPI / 96
        if size < SMALLEST - 1e-9:
            problems.append(f"{what} {text.get_text()!r} is {size:.1f} pt at the saved size")
    for legend_what, legend in _legends(fig):
        for text in legend.get_texts():
            size = text.get_fontsize() * DPI / 96
            if size < SMALLEST - 1e-9:
                problems.append(f"{legend_what} text {text.get_text()!r} is {size:.1f} pt")
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for label, path in _curves(ax):
                if path.intersects_bbox(box, filled=False):
                    problems.append(f"{legend_what} hides part of the curve {label!r}")
    for i, ax in enumerate(fig.axes):  # curves on top of each other, drawn alike
        for a, b in itertools.combinations(_labelled(ax), 2):
            if _style(a) == _style(b) and _coincide(a, b):
                problems.append(f"axes {i}: {a.get_label()!r} hides {b.get_label()!r} "
                                "(same path, same line style and marker)")
    for i, ax in enumerate(fig.axes):  # a line through a label
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            for label, path in _curves(ax):
                if path.intersects_bbox(box, filled=False):
                    problems.append(f"axes {i} text {text.get_text()!r} is struck by the "
                                    f"line {label!r}")
    return problems


def test_every_figure_reads_at_a_glance(smoke_results):
    names = []
    problems = {}
    for name, fig in draw_figures(smoke_results):
        names.append(name)
        try:
            found = _problems(fig)
        finally:
            plt.close(fig)
        if found:
            problems[name] = found
    assert len(names) >= 8
    assert problems == {}


def test_the_check_sees_overlaps():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a curve")
    ax.legend(loc="center", fontsize=6)
    ax.set_title("a long title that runs far beyond the axes on both sides of them")
    ax.set_xlabel("x", fontsize=20)
    ax.set_xticks([0.0, 0.01], ["zero", "one hundredth"])
    ax.set_ylabel("y")
    ax.text(0.5, 0.5, "struck")
    ax.plot([0, 1], [0, 1.0001], label="another curve", color="tab:orange")
    found = _problems(fig)
    plt.close(fig)
    assert any("legend hides part of the curve 'a curve'" in p for p in found)
    assert any("legend text 'a curve' is 6.2 pt" in p for p in found)
    assert any("struck by the line 'a curve'" in p for p in found)
    assert any("axes 0 title runs off the figure" in p for p in found)
    assert any("'a curve' hides 'another curve'" in p for p in found)
    assert any("tick label 'zero' overlaps axes 0 x tick label 'one hundredth'" in p
               for p in found)


def test_a_width_the_steps_check_did_not_settle_is_drawn_open(smoke_results):
    """The fourth set: an unsettled pe_dim* or m* is an open marker over the line, named
    in the legend, and the figures still read at a glance."""
    import copy

    from sparse_token_estimators.reproduce._fcn_tightness import plot_critical_widths
    from sparse_token_estimators.reproduce._width_scaling import plot_width_scaling

    results = copy.deepcopy(smoke_results)
    for key, stars in (("width_scaling", (4, 6, 8)), ("fcn_tightness", (10, 14, 20))):
        for row, star in zip(results[key]["critical"], stars):
            row.update(star=star, lower=star - 1, status="found", settled=True,
                       upper_bound=star)
        results[key]["critical"][-1].update(status="unresolved", settled=False)
    results["width_scaling"]["slope"] = 0.5
    for draw, opened in ((plot_width_scaling, 1), (plot_critical_widths, 2)):
        fig = draw(results)
        try:
            marks = [c for ax in fig.axes for c in ax.collections
                     if len(c.get_offsets()) and len(c.get_facecolor())
                     and np.allclose(c.get_facecolor()[0], (1, 1, 1, 1))]
            assert len(marks) == opened  # one per model
            assert all(len(c.get_offsets()) == 1 for c in marks)  # the last T only
            assert any(text.get_text().startswith("open:") for ax in fig.axes
                       for text in ax.get_legend().get_texts())
            assert _problems(fig) == []
        finally:
            plt.close(fig)
