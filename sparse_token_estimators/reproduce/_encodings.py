"""The five positional encodings under one protocol: trained at T, scored at every length to 8T.

Each encoding of ``positional.ENCODINGS`` in the paper's model at
``length_pe_dim`` with the paper's training: "stochastic" (the paper's),
"fixed" (its baseline), "sinusoidal" (Vaswani et al. 2017), "learned" and
"randomized" (Ruoss et al., ACL 2023, out of ``max_seq_len`` = 8T); the
ensemble of draws beside the one-draw model where draws mean something.
Scored on the dense length grid, seed by seed. Nothing is judged; the
stochastic and fixed fits are shared with length generalisation.
"""

from ._experiment import (
    Experiment,
    beyond_training,
    config_of,
    find,
    fmt_spread,
    length_cells,
    length_rows,
    markdown_table,
    select,
    summarise,
)
from ._figures import band, legend_below, length_axes, pyplot, task_title
from ._models import MODELS, Fit

#: (encoding, model key) in the order of the table and the legend
ENTRIES = (("stochastic", "paper"), ("stochastic", "ensemble"), ("fixed", "fixed"),
           ("sinusoidal", "sinusoidal"), ("learned", "learned"),
           ("randomized", "randomized"), ("randomized", "randomized_ensemble"))
#: what "learns the task at T" means in the sentences (R^2 at T, the bar it must clear)
LEARNS_AT_T = 0.85
#: R^2 at or below which a model does "no better than predicting 0"
NOTHING = 0.05


def entries(config):
    """The ``(encoding, model)`` pairs the run fits."""
    return [(e, m) for e, m in ENTRIES
            if m != "randomized_ensemble" or config.randomized_ensemble]


class Encodings(Experiment):
    name = "encodings"
    title = "Positional encodings compared (measured, not judged)"

    def fits(self, config):
        return [Fit(model, config.length_pe_dim, config.seq_len) for _, model in entries(config)]

    def collect(self, config, records, found=None):
        T, p = config.seq_len, config.length_pe_dim
        rows, beyond = [], []
        for encoding, model in entries(config):
            for seed in config.seeds():
                r = records[Fit(model, p, T), seed]
                rows += length_rows(r, T, seed, encoding=encoding, model=model,
                                    model_name=r["model_name"], pe_dim=p)
                beyond.append({"encoding": encoding, "model": model,
                               "model_name": r["model_name"], "seed": seed,
                               "r2_beyond_T": beyond_training(r, T),
                               "fit_cpu_s": r["fit_cpu_s"]})
        return {"rows": rows,
                "summary": summarise(rows, ["encoding", "model", "model_name", "length"],
                                     ["r2"]),
                "beyond_training": summarise(beyond, ["encoding", "model", "model_name"],
                                             ["r2_beyond_T", "fit_cpu_s"]),
                "beyond_training_per_seed": beyond}

    tables = {"encodings.csv": "rows", "encodings_summary.csv": "summary",
              "encodings_beyond_training.csv": "beyond_training_per_seed"}

    def summary(self, results):
        config, section = config_of(results), results[self.name]
        T, factors = config.seq_len, config.length_factors
        lines = [f"Held-out R^2 (scikit-learn's, averaged over the d outputs), mean ± sd over "
                 f"{config.n_seeds} seeds, trained at T={T} with pe_dim="
                 f"{config.length_pe_dim} and the paper's model's training (the ensembles: "
                 f"theirs), tables of max_seq_len = {max(factors) * T} positions (the grid's "
                 "end), at the named lengths and averaged over every length of the grid "
                 "beyond T (encodings.csv has every length). Measured: no verdict.", ""]
        rows = []
        for encoding, model in _present(section):
            beyond = find(section["beyond_training"], model=model)
            rows.append([encoding, results["models"][model]["name"],
                         *length_cells(section["summary"], config, model=model),
                         fmt_spread(beyond, "r2_beyond_T"), f"{beyond['fit_cpu_s_mean']:.1f}"])
        lines += markdown_table(["encoding", "model"] + [f"{f}T" for f in factors]
                                + ["beyond T", "fit CPU s"], rows,
                                ["l", "l"] + ["r"] * (len(factors) + 2))
        return lines + [""] + [f"- {sentence}" for sentence in sentences(results)]

    def figures(self):
        return {"encodings.png": plot_encodings}


def _present(section):
    seen = {(r["encoding"], r["model"]) for r in section["beyond_training"]}
    return [entry for entry in ENTRIES if entry in seen]


def sentences(results):
    """One sentence per encoding and model from its numbers: R^2 at T, at the largest
    length and beyond T, whether it learns the task at T (``LEARNS_AT_T``), what it
    keeps beyond T, and where it stands against the paper's model there."""
    config, section = config_of(results), results["encodings"]
    T, top = config.seq_len, max(config.length_factors)

    def mean(model, length=None):
        if length is None:
            return find(section["beyond_training"], model=model)["r2_beyond_T_mean"]
        return find(section["summary"], model=model, length=length)["r2_mean"]

    reference = mean("paper")
    out = []
    for encoding, model in _present(section):
        at_T, at_top, beyond = mean(model, T), mean(model, top * T), mean(model)
        name = results["models"][model]["name"]
        text = (f"**{encoding}** ({name}): R^2 {at_T:.3f} at T, {at_top:.3f} at {top}T, "
                f"{beyond:.3f} averaged beyond T. ")
        text += ("It learns the task at T" if at_T >= LEARNS_AT_T
                 else f"It does not learn the task at T (R^2 below {LEARNS_AT_T})")
        if beyond <= NOTHING:
            text += f", and beyond T it does no better than predicting 0 (R^2 <= {NOTHING})"
        elif at_T > 0:
            text += f", and keeps {beyond / at_T:.0%} of its R^2 at T beyond it"
        if model != "paper":
            diff = beyond - reference
            text += (f"; beyond T it is {abs(diff):.3f} {'above' if diff >= 0 else 'below'} "
                     "the paper's model (stochastic, 1 draw)")
        out.append(text + ".")
    return out


#: a line style per encoding (colours: the model's, or one per encoding)
COLOURS = {"paper": "tab:blue", "ensemble": "tab:green", "fixed": "tab:orange",
           "sinusoidal": "tab:purple", "learned": "tab:brown", "randomized": "tab:cyan",
           "randomized_ensemble": "tab:olive"}
#: a marker and line style per encoding, so that curves that coincide (the
#: fixed table and the learned one start alike) all show
MARKS = {"paper": ("o", "-"), "ensemble": ("D", "--"), "fixed": ("^", "-"),
         "sinusoidal": ("v", "-."), "learned": ("s", ":"), "randomized": ("P", "-"),
         "randomized_ensemble": ("X", "--")}


def plot_encodings(results):
    """Held-out R^2 at every test length, a curve with seed band per encoding."""
    plt = pyplot()
    config, section = config_of(results), results["encodings"]
    fig, ax = plt.subplots(figsize=(10.5, 6), layout="constrained")
    for encoding, model in _present(section):
        rows = select(section["summary"], "length", model=model)
        marker, linestyle = MARKS.get(model, ("o", "--" if MODELS[model].ensemble else "-"))
        band(ax, [r["length"] for r in rows], rows, "r2", model=model,
             label=f"{encoding}: {results['models'][model]['name']}",
             color=COLOURS[model], linestyle=linestyle, marker=marker, markerfacecolor="none",
             markevery=max(1, len(rows) // 12), linewidth=1.6 if linestyle == ":" else 1.2)
    length_axes(ax, config, section["summary"],
                title=f"Positional encodings, trained at T, pe_dim={config.length_pe_dim}\n"
                      f"({task_title(config)})")
    legend_below(fig, ax)
    return fig


EXPERIMENT = Encodings()
