"""More architectures (beyond the paper): smallest widths and R^2 per length, measured.

The package's transformer encoder (:class:`~sparse_token_estimators.
SparseTokenEncoder`, one block, one head, attention pooling) and recurrent
nets (:class:`~sparse_token_estimators.SparseTokenRNN`): the smallest width
(``d_model``, ``hidden_size``) whose score reaches 0.8, by the protocol of
:mod:`._bracket` (the best mean validation R^2 over the family's
learning-rate grid, confirmed at the next width, the steps checked by
doubling them), for the encoder without positional encoding, the GRU and
the LSTM; and held-out R^2 at the named lengths up to 8T at
``architecture_width`` for the encoder with each encoding and each cell, at
``architecture_training``'s one rate. All train on the population. Nothing
here is judged.
"""

import math
from functools import partial

from ..architectures import CELLS, ENCODER_ENCODINGS
from ..theory import fcn_critical_width
from ._bracket import (
    TARGET_R2,
    bracket_text,
    critical_section,
    population_fit,
    protocol_searches,
    r2_text,
    rates_text,
    star_text,
    steps_text,
)
from ._experiment import (
    Experiment,
    config_of,
    find,
    fmt,
    fmt_spread,
    markdown_table,
    select,
    summarise,
)
from ._figures import MIN_FONT, length_axes, pyplot, task_title
from ._models import Fit

#: the models whose smallest width is searched
SEARCHED = ("encoder_none", "gru", "lstm")
#: the models scored per length, in the order of the table
LENGTH_MODELS = (*(f"encoder_{e}" for e in ENCODER_ENCODINGS), *CELLS)
#: where the searches start and how far down they may go (up: to 4 T d, as the FCN's)
START, FLOOR = 4, 1


def _fit(config, model, width, seq_len=None):
    return Fit(model, width, seq_len or config.seq_len, "population",
               n_train=config.architecture_n_train)


def _stop(config, T):
    return max(START, min(config.architecture_width_stop, 4 * T * config.token_dim))


def _search_fit(config, model, T, width, lr, times):
    return population_fit(config, model, T, width, lr, times, config.architecture_n_train)


def searches(config):
    """Generator: at each T of ``architecture_seq_lens()`` in increasing T, the searched
    models in lock-step by the protocol (:func:`._bracket.protocol_searches`), each
    starting from its smallest width at the T before (from START at the first); returns
    ``{T: {model: outcome}}``."""
    return protocol_searches(
        config, config.architecture_seq_lens(), SEARCHED, partial(_search_fit, config),
        start=lambda model, T, previous: previous["width"] if previous and previous["width"]
        else START,
        stop=lambda model, T: _stop(config, T), floor=lambda model, T: FLOOR)


class Architectures(Experiment):
    name = "architectures"
    title = "More architectures: smallest widths and lengths (beyond the paper; measured)"

    def fits(self, config):
        return [_fit(config, m, config.architecture_width) for m in LENGTH_MODELS]

    def search(self, config):
        return searches(config)

    def collect(self, config, records, found=None):
        T0, seeds, d = config.seq_len, config.seeds(), config.token_dim
        section = critical_section(
            config, found, records, partial(_search_fit, config), "width",
            lambda model, T: {"fcn_bound_width": fcn_critical_width(
                T, config.n_selected, d, TARGET_R2), "stop": _stop(config, T)})
        rows = []
        for model in LENGTH_MODELS:
            for seed in seeds:
                r = records[_fit(config, model, config.architecture_width), seed]
                rows += [{"model": model, "model_name": r["model_name"],
                          "width": config.architecture_width, "length": L, "factor": L / T0,
                          "seed": seed, "r2": r2}
                         for L, r2 in r["r2_by_length"].items() if not math.isnan(r2)]
        return {**section, "n_train": config.architecture_n_train,
                "width": config.architecture_width, "td": T0 * d,
                "width_stop": config.architecture_width_stop,
                "fcn_bound_width": fcn_critical_width(T0, config.n_selected, d, TARGET_R2),
                "lengths": rows,
                "lengths_summary": summarise(rows, ["model", "model_name", "length"], ["r2"])}

    tables = {"architectures_widths.csv": "points", "architectures_critical.csv": "critical",
              "architectures_lengths.csv": "lengths"}

    def summary(self, results):
        config, s = config_of(results), results[self.name]
        T, factors, n = config.seq_len, config.length_factors, config.n_seeds
        training = config.architecture_training
        lens = _lens(s)
        where = (f"at T={T}" if lens == [T] else
                 f"at T = {', '.join(map(str, lens))} for the widths and T={T} for the lengths")
        grids = "; ".join(f"{family} {', '.join(f'{lr:g}' for lr in rates)}"
                          for family, rates in s["lr_grids"].items())
        lines = [f"Beyond the paper, measured, no verdict. Trained on the population {where} "
                 f"({s['n_train']} fresh sequences every epoch, batch {training.batch_size}, "
                 f"{training.max_epochs} epochs); the encoder has one block and one head. "
                 f"Smallest width whose validation R^2 (mean over {n} seeds, at the best of "
                 f"the learning rates: {grids}; Adam at a constant rate) reaches "
                 f"{s['target_r2']}, by the protocol of the scaling law (bracketed to a factor "
                 f"{s['refine']:.3f}, confirmed at the next width, both bracketing widths "
                 "refitted with twice the steps; widths up to "
                 f"min({s['width_stop']}, 4 T d)), with its held-out R^2, beside T d and the "
                 f"width from which the FCN bound allows R^2 {s['target_r2']}. The lengths "
                 f"below train at Adam lr {training.lr}, one setting for all.", ""]
        rows = [[r["model_name"], str(r["seq_len"]), star_text(r), bracket_text(r),
                 r["status"], r2_text(r), fmt(r["lr_at_star"], "g"), steps_text(r),
                 str(r["td"]), str(r["fcn_bound_width"]), rates_text(r)]
                for r in sorted(s["critical"], key=_order)]
        lines += markdown_table(["model", "T", "smallest width", "bracket", "search",
                                 "held-out R^2", "rate", "2x steps (val R^2)", "T d",
                                 "FCN bound's width", "rate chosen per width"],
                                rows, ["l", "r", "r", "r", "l", "r", "r", "l", "r", "r", "l"])
        lines += [f"{r['model_name']} at T={r['seq_len']}: {r['reason']}."
                  for r in sorted(s["critical"], key=_order) if r["status"] != "found"]
        lines += ["", f"Held-out R^2 (mean ± sd over {n} seeds) at width {s['width']} "
                  f"(d_model, hidden_size), trained at T={T}:", ""]
        rows = [[results["models"][m]["name"]] + [
            fmt_spread(find(s["lengths_summary"], model=m, length=f * T), "r2")
            for f in factors] for m in _present(s)]
        lines += markdown_table(["model"] + [f"{f}T" for f in factors], rows,
                                ["l"] + ["r"] * len(factors))
        return lines + [""] + [f"- {sentence}" for sentence in sentences(results)]

    def figures(self):
        return {"architectures.png": plot_architectures}


def _lens(section):
    """The T of the width searches, increasing."""
    return sorted({r["seq_len"] for r in section["critical"]})


def _order(row):
    return SEARCHED.index(row["model"]), row["seq_len"]


def _present(section):
    seen = {r["model"] for r in section["lengths_summary"]}
    return [m for m in LENGTH_MODELS if m in seen]


def sentences(results):
    """The reader's questions, answered from the numbers (measured, not judged)."""
    config, s = config_of(results), results["architectures"]
    T, top, target = config.seq_len, max(config.length_factors), s["target_r2"]

    def r2(model, factor):
        row = find(s["lengths_summary"], model=model, length=factor * T)
        return math.nan if row is None else row["r2_mean"]

    out, lens = [], _lens(s)
    for model, what in (("encoder_none", "The encoder without positional encoding"),
                        ("gru", "The GRU"), ("lstm", "The LSTM")):
        rows = select(s["critical"], _order, model=model)
        if not rows:
            continue
        if len(lens) == 1:
            r = rows[0]
            if r["star"]:
                out.append(f"{what} reaches R^2 {target} at width {r['star']} (d = "
                           f"{config.token_dim}, T d = {r['td']}; held-out R^2 "
                           f"{fmt(r['test_r2_mean'])}).")
            else:
                out.append(f"{what} does not reach R^2 {target} at any width up to "
                           f"{max(r['evaluated'])}.")
            continue
        found = [r for r in rows if r["star"]]
        text = f"{what}: "
        if found:
            text += (f"smallest width reaching R^2 {target}: "
                     + ", ".join(f"{r['star']} at T={r['seq_len']}" for r in found)
                     + f" (d = {config.token_dim}; "
                     + ("below T d at each" if all(r["star"] < r["td"] for r in found)
                        else "not below T d at each") + ")")
        missed = [r for r in rows if not r["star"]]
        if missed:
            text += ("; " if found else "") + "not reached " + ", ".join(
                f"at T={r['seq_len']} up to width {max(r['evaluated'])}" for r in missed)
        out.append(text + ".")
    keeps = [m for m in _present(s) if r2(m, 1) >= target and r2(m, top) >= target]
    names = {m: results["models"][m]["name"] for m in _present(s)}
    out.append(f"At width {s['width']}, R^2 stays at or above {target} from T to {top}T for: "
               + (", ".join(names[m] for m in keeps) if keeps else "none") + ".")
    encoders = [m for m in _present(s) if m.startswith("encoder_")]
    if encoders:
        spread = [r2(m, top) for m in encoders]
        best = encoders[max(range(len(encoders)), key=lambda i: spread[i])]
        worst = encoders[min(range(len(encoders)), key=lambda i: spread[i])]
        out.append(f"Across the encoder's encodings, R^2 at {top}T ranges from "
                   f"{min(spread):.3f} ({names[worst]}) to {max(spread):.3f} ({names[best]}).")
    return out


#: one marker per model of the length panel: curves that coincide stay told apart
MARKERS = dict(zip(LENGTH_MODELS, "osv^D<>phX*P"))
#: one colour per model, the same in both panels, none of a reference line's (black:
#: T d and R^2 = 0; red: the FCN bound's width; gray: the training length)
COLORS = {"encoder_none": "tab:blue", "gru": "tab:green", "lstm": "tab:orange",
          "rnn": "tab:cyan", "encoder_stochastic": "tab:purple", "encoder_fixed": "tab:brown",
          "encoder_sinusoidal": "tab:pink", "encoder_learned": "tab:olive",
          "encoder_randomized": "navy", "encoder_rope": "goldenrod"}
#: octaves of T between the "not reached" markers of models that share a point
NOT_REACHED_SPREAD = 0.12


def plot_architectures(results):
    """Smallest width per architecture against T d and the FCN bound; R^2 per length."""
    plt = pyplot()
    config, s = config_of(results), results["architectures"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.6), layout="constrained",
                                      width_ratios=(1, 1.6))
    if len(_lens(s)) == 1:
        _width_bars(left, s)
    else:
        _width_lines(left, s)
    for model in _present(s):
        rows = select(s["lengths_summary"], "length", model=model)
        right.errorbar([r["length"] for r in rows], [r["r2_mean"] for r in rows],
                       yerr=[r["r2_sd"] for r in rows], capsize=2, marker=MARKERS[model],
                       markersize=4, color=COLORS[model],
                       label=results["models"][model]["name"].split(" (")[0],
                       linestyle="-" if model.startswith("encoder_") else "--")
    length_axes(right, config, s["lengths_summary"], title=f"Width {s['width']}, trained at T")
    for ax, ncol in ((left, 2), (right, 3)):  # one legend per panel, below it
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, fontsize=MIN_FONT)
    fig.suptitle(f"More architectures (beyond the paper; {task_title(config)})",
                 fontsize=MIN_FONT + 2)
    return fig


def _width_bars(ax, s):
    """One T: a bar per searched model, T d and the FCN bound's width as lines."""
    # the value in the tick label, not over the bar: no reference line strikes it
    labels = [r["model_name"].split(" (")[0].replace("transformer encoder, ", "encoder,\n")
              + "\n" + (f"{r['star']}" if r["star"] else f"none up to {max(r['evaluated'])}")
              for r in s["critical"]]
    stars = [r["star"] or 0 for r in s["critical"]]
    td, bound = s["critical"][0]["td"], s["critical"][0]["fcn_bound_width"]
    ax.bar(range(len(stars)), stars, color=[COLORS[r["model"]] for r in s["critical"]])
    ax.axhline(td, color="black", linestyle="--", label=f"T d = {td}")
    ax.axhline(bound, color="tab:red", linestyle=":",
               label=f"FCN bound's width for R^2 {s['target_r2']}")
    ax.set_xticks(range(len(stars)), labels)
    ax.set(ylim=(0, 1.1 * max([td, bound, *stars])),
           ylabel="smallest width (d_model, hidden_size)",
           title=f"Smallest width with validation R^2 >= {s['target_r2']}")


def _width_lines(ax, s):
    """Several T: each searched model's smallest width against T (log axes),
    beside T d and the FCN bound's width; a T not reached marked at the widest fit."""
    lens = _lens(s)
    by_T = {r["seq_len"]: r for r in s["critical"]}
    ax.plot(lens, [by_T[T]["td"] for T in lens], color="black", linestyle="--", label="T d")
    ax.plot(lens, [by_T[T]["fcn_bound_width"] for T in lens], color="tab:red", linestyle=":",
            label=f"FCN bound's width for R^2 {s['target_r2']}")
    # models not reached at the same (T, width): their markers spread sideways
    missed = [r for r in sorted(s["critical"], key=_order) if not r["star"]]
    sharing = {}
    for r in missed:
        sharing.setdefault((r["seq_len"], max(r["evaluated"])), []).append(r["model"])
    for model in SEARCHED:
        rows = select(s["critical"], _order, model=model)
        name = rows[0]["model_name"].split(" (")[0].replace("transformer encoder, ", "encoder, ")
        found = [r for r in rows if r["star"]]
        ax.plot([r["seq_len"] for r in found], [r["star"] for r in found], marker=MARKERS[model],
                color=COLORS[model], label=name)
        for r in (r for r in missed if r["model"] == model):
            point = (r["seq_len"], max(r["evaluated"]))
            k, i = len(sharing[point]), sharing[point].index(model)
            ax.scatter(point[0] * 2 ** (NOT_REACHED_SPREAD * (i - (k - 1) / 2)), point[1],
                       marker="^", s=50, color=COLORS[model], zorder=3)
    if missed:
        ax.scatter([], [], marker="^", s=50, color="gray",
                   label="not reached up to this width (colour: the model)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(lens, [str(T) for T in lens])
    ax.set(xlabel="sequence length T", ylabel="smallest width (d_model, hidden_size)",
           title=f"Smallest width with validation R^2 >= {s['target_r2']}")


EXPERIMENT = Architectures()
