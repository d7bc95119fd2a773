"""More architectures (beyond the paper): smallest widths and R^2 per length, measured.

Beside the paper's one-layer transformer and the fully-connected net, the
package's standard transformer encoder (:class:`~sparse_token_estimators.
SparseTokenEncoder`, one block, one head, attention pooling) and recurrent
nets (:class:`~sparse_token_estimators.SparseTokenRNN`) at T = ``seq_len``:

- the smallest width (``d_model``, ``hidden_size``) whose mean validation R^2
  over the seeds reaches the scaling law's target (0.8), by the same
  bracketing search (:mod:`._bracket`, refined to a factor sqrt(2)), for the
  encoder without positional encoding, the GRU and the LSTM;
- held-out R^2 at the named lengths up to 8T at ``architecture_width``, for
  the encoder with each of its encodings (the tables hold 8T positions) and
  each cell.

Every fit trains on the population (``architecture_n_train`` fresh
sequences every epoch, ``architecture_training``: Adam at lr 0.01, batch 64,
10 epochs, one setting for all of them, chosen before this experiment on a
validation set of 2000 fresh sequences at T=10, d=8, q=3 from lr 0.003 and
0.01 (batch 64; and lr 0.003, batch 256, which left the recurrent nets at
R^2 0.4 at width 32): lr 0.01 was the better for the GRU, the LSTM and the
encoder alike). One encoder block
with one head (any d_model is allowed: two heads would need an even one).
Nothing here is a claim of the paper and nothing is judged.
"""

import math

from ..architectures import CELLS, ENCODER_ENCODINGS
from ..theory import fcn_critical_width
from ._bracket import BracketSearch, run_brackets
from ._experiment import Experiment, find, fmt, fmt_spread, markdown_table, summarise
from ._figures import MIN_FONT, pyplot, task_title
from ._fits import MODELS, Fit, Model, model_name
from ._length_generalisation import length_axes
from ._width_scaling import REFINE, TARGET_R2, mean_score, replay_round

ENCODER_PARAMS = (("n_heads", 1), ("n_layers", 1))
#: how the names call each encoding
ENCODING_NAMES = {**{e: f"{e} PE" for e in ENCODER_ENCODINGS}, "none": "no PE", "rope": "RoPE"}
MODELS.update({
    **{f"encoder_{e}": Model(f"transformer encoder, {ENCODING_NAMES[e]} (beyond the paper)",
                             "encoder",
                             "architecture_training",
                             params=(("positional_encoding", e), *ENCODER_PARAMS), cost=1.0)
       for e in ENCODER_ENCODINGS},
    **{cell: Model(f"{cell.upper()} (beyond the paper)", "rnn", "architecture_training",
                   params=(("cell", cell),)) for cell in CELLS},
})
#: the models whose smallest width is searched
SEARCHED = ("encoder_none", "gru", "lstm")
#: the models scored per length, in the order of the table
LENGTH_MODELS = (*(f"encoder_{e}" for e in ENCODER_ENCODINGS), *CELLS)
#: where the searches start and how far down they may go (up: to 4 T d, as the FCN's)
START, FLOOR = 4, 1


def _fit(config, model, width):
    return Fit(model, width, config.seq_len, "population", n_train=config.architecture_n_train)


def _searches(config, fit_round):
    stop = max(START, 4 * config.seq_len * config.token_dim)
    searches = {m: BracketSearch(START, target=TARGET_R2, stop=stop, floor=FLOOR,
                                 factor=2.0, refine=REFINE) for m in SEARCHED}

    def evaluate(jobs):
        fits = [_fit(config, m, w) for m, w in jobs]
        return mean_score(fit_round(fits), fits, config.seeds())

    return run_brackets(evaluate, searches)


class Architectures(Experiment):
    name = "architectures"
    title = "More architectures: smallest widths and lengths (beyond the paper; measured)"

    def fits(self, config):
        return [_fit(config, m, config.architecture_width) for m in LENGTH_MODELS]

    def search(self, config, fit_round):
        _searches(config, fit_round)

    def collect(self, config, records):
        brackets = _searches(config, replay_round(config, records))
        T, seeds = config.seq_len, config.seeds()
        points, critical = [], []
        for model, b in brackets.items():
            for w, _ in b.evaluated:
                for seed in seeds:
                    r = records[_fit(config, model, w), seed]
                    points.append({"model": model, "model_name": r["model_name"], "width": w,
                                   "seed": seed, "val_r2": r["val_r2"], "test_r2": r["test_r2"],
                                   "fit_cpu_s": r["fit_cpu_s"]})
        summary = summarise(points, ["model", "model_name", "width"],
                            ["val_r2", "test_r2", "fit_cpu_s"])
        for model, b in brackets.items():
            at = find(summary, model=model, width=b.width) if b.width else None
            critical.append({"model": model, "model_name": model_name(model, config),
                             "star": b.width, "lower": b.lower, "status": b.status,
                             "evaluated": [w for w, _ in b.evaluated],
                             "test_r2_mean": at["test_r2_mean"] if at else None,
                             "test_r2_sd": at["test_r2_sd"] if at else None})
        rows = []
        for model in LENGTH_MODELS:
            for seed in seeds:
                r = records[_fit(config, model, config.architecture_width), seed]
                rows += [{"model": model, "model_name": r["model_name"],
                          "width": config.architecture_width, "length": L, "factor": L / T,
                          "seed": seed, "r2": r2}
                         for L, r2 in r["r2_by_length"].items() if not math.isnan(r2)]
        return {"target_r2": TARGET_R2, "refine": REFINE, "n_train": config.architecture_n_train,
                "width": config.architecture_width, "td": T * config.token_dim,
                "fcn_bound_width": fcn_critical_width(T, config.n_selected, config.token_dim,
                                                      TARGET_R2),
                "points": points, "summary": summary, "critical": critical,
                "lengths": rows,
                "lengths_summary": summarise(rows, ["model", "model_name", "length"], ["r2"])}

    def tables(self, results):
        s = results[self.name]
        return {"architectures_widths.csv": s["points"],
                "architectures_critical.csv": s["critical"],
                "architectures_lengths.csv": s["lengths"]}

    def summary(self, results):
        cfg, s = results["config"], results[self.name]
        T, factors, n = cfg["seq_len"], cfg["length_factors"], cfg["n_seeds"]
        lines = [f"Beyond the paper, measured, no verdict. Trained on the population at T={T} "
                 f"({s['n_train']} fresh sequences every epoch, Adam lr "
                 f"{cfg['architecture_training']['lr']}, batch "
                 f"{cfg['architecture_training']['batch_size']}, "
                 f"{cfg['architecture_training']['max_epochs']} epochs: one setting for all; "
                 "the quick and paper presets' was chosen on a validation set before the "
                 "run, see the module's docstring); the encoder has one "
                 f"block and one head. Smallest width whose validation R^2 (mean over {n} "
                 f"seeds) reaches {s['target_r2']}, by the bracketing search of the scaling "
                 f"law (to a factor {s['refine']:.3f}), with its held-out R^2; T d = "
                 f"{s['td']}, and the FCN bound allows R^2 {s['target_r2']} only from width "
                 f"{s['fcn_bound_width']}.", ""]
        rows = [[r["model_name"], fmt(r["star"], "d") if r["star"] else "-",
                 f"({fmt(r['lower'], 'd') if r['lower'] else '-'}, "
                 f"{fmt(r['star'], 'd') if r['star'] else '-'}]", r["status"],
                 "-" if r["test_r2_mean"] is None
                 else f"{r['test_r2_mean']:.3f} ± {r['test_r2_sd']:.3f}",
                 ", ".join(str(w) for w in r["evaluated"])] for r in s["critical"]]
        lines += markdown_table(["model", "smallest width", "bracket", "search",
                                 "held-out R^2", "widths fitted"], rows,
                                ["l", "r", "r", "l", "r", "l"])
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


def _present(section):
    seen = {r["model"] for r in section["lengths_summary"]}
    return [m for m in LENGTH_MODELS if m in seen]


def sentences(results):
    """The reader's questions, answered from the numbers (measured, not judged)."""
    cfg, s = results["config"], results["architectures"]
    T, top, target = cfg["seq_len"], max(cfg["length_factors"]), s["target_r2"]

    def r2(model, factor):
        row = find(s["lengths_summary"], model=model, length=factor * T)
        return math.nan if row is None else row["r2_mean"]

    out = []
    by_model = {r["model"]: r for r in s["critical"]}
    for model, what in (("encoder_none", "The encoder without positional encoding"),
                        ("gru", "The GRU"), ("lstm", "The LSTM")):
        r = by_model.get(model)
        if r is None:
            continue
        if r["star"]:
            out.append(f"{what} reaches R^2 {target} at width {r['star']} (d = "
                       f"{cfg['token_dim']}, T d = {s['td']}; held-out R^2 "
                       f"{fmt(r['test_r2_mean'])}).")
        else:
            out.append(f"{what} does not reach R^2 {target} at any width up to "
                       f"{max(r['evaluated'])}.")
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


def plot_architectures(results):
    """Smallest width per architecture against T d and the FCN bound; R^2 per length."""
    plt = pyplot()
    cfg, s = results["config"], results["architectures"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained",
                                      width_ratios=(1, 1.6))
    # the value in the tick label, not over the bar: no reference line strikes it
    labels = [r["model_name"].split(" (")[0].replace("transformer encoder, ", "encoder,\n")
              + "\n" + (f"{r['star']}" if r["star"] else f"none up to {max(r['evaluated'])}")
              for r in s["critical"]]
    stars = [r["star"] or 0 for r in s["critical"]]
    left.bar(range(len(stars)), stars, color="tab:blue")
    left.axhline(s["td"], color="black", linestyle="--", label=f"T d = {s['td']}")
    left.axhline(s["fcn_bound_width"], color="tab:red", linestyle=":",
                 label=f"FCN bound's width for R^2 {s['target_r2']}")
    left.set_xticks(range(len(stars)), labels)
    top = max([s["td"], s["fcn_bound_width"], *stars])
    left.set(ylim=(0, 1.1 * top), ylabel="smallest width (d_model, hidden_size)",
             title=f"Smallest width with validation R^2 >= {s['target_r2']}")
    for model in _present(s):
        rows = sorted((r for r in s["lengths_summary"] if r["model"] == model),
                      key=lambda r: r["length"])
        right.errorbar([r["length"] for r in rows], [r["r2_mean"] for r in rows],
                       yerr=[r["r2_sd"] for r in rows], capsize=2, marker=MARKERS[model],
                       markersize=4, label=results["models"][model]["name"].split(" (")[0],
                       linestyle="-" if model.startswith("encoder_") else "--")
    length_axes(right, cfg, s["lengths_summary"], title=f"Width {s['width']}, trained at T")
    handles, names = (sum(pair, []) for pair in zip(left.get_legend_handles_labels(),
                                                     right.get_legend_handles_labels()))
    # one legend for both panels, below them (``legend_below``'s place and size)
    fig.legend(handles, names, loc="outside lower center", ncol=4, fontsize=MIN_FONT)
    fig.suptitle(f"More architectures (beyond the paper; {task_title(cfg)})",
                 fontsize=MIN_FONT + 2)
    return fig


EXPERIMENT = Architectures()
