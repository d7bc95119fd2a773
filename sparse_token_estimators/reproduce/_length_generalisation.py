"""Claim 2, length generalisation: trained at T, scored at every length up to 8T.

The paper's model and the fixed-PE baseline (one table: fitted once, with
the paper's training), at ``length_pe_dim``, the ensemble beside them,
trained at T and scored at every length of a dense grid from q to 8T, as
Ruoss et al. (ACL 2023) report it. Judged at T and 4T. The width-separation
fits give R^2 at 4T against pe_dim: length generalisation improves with d_p.
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
from ._figures import band, legend_beside, length_axes, powers_of_two_ticks, pyplot, task_title
from ._models import Fit

MODELS = ("paper", "ensemble", "fixed")


class LengthGeneralisation(Experiment):
    name = "length_generalisation"
    title = "Length generalisation (held-out R^2 per test length)"

    def fits(self, config):
        T, p = config.seq_len, config.length_pe_dim
        return ([Fit(model, p, T) for model in MODELS]
                + [Fit("paper", q, T) for q in config.pe_dims]
                + [Fit("ensemble", q, T) for q in config.ensemble_pe_dims])

    def collect(self, config, records, found=None):
        T, p = config.seq_len, config.length_pe_dim
        rows, beyond = [], []
        for model in MODELS:
            for seed in config.seeds():
                r = records[Fit(model, p, T), seed]
                rows += length_rows(r, T, seed, model=model, model_name=r["model_name"],
                                    pe_dim=p)
                beyond.append({"model": model, "model_name": r["model_name"], "seed": seed,
                               "r2_beyond_T": beyond_training(r, T)})
        by_pe = []
        for model, grid in (("paper", config.pe_dims), ("ensemble", config.ensemble_pe_dims)):
            for q in grid:
                for seed in config.seeds():
                    r = records[Fit(model, q, T), seed]
                    by_pe.append({"model": model, "model_name": r["model_name"], "pe_dim": q,
                                  "seed": seed, **{f"r2_at_{f}T": r["r2_by_length"][f * T]
                                                   for f in config.length_factors}})
        factors = [f"r2_at_{f}T" for f in config.length_factors]
        return {
            "rows": rows,
            "summary": summarise(rows, ["model", "model_name", "length"], ["r2"]),
            "beyond_training": summarise(beyond, ["model", "model_name"], ["r2_beyond_T"]),
            "beyond_training_per_seed": beyond,
            "by_pe_dim": by_pe,
            "by_pe_dim_summary": summarise(by_pe, ["model", "model_name", "pe_dim"], factors),
        }

    tables = {"length_generalisation.csv": "rows", "length_generalisation_summary.csv": "summary",
              "length_beyond_training.csv": "beyond_training_per_seed",
              "length_vs_pe_dim.csv": "by_pe_dim"}

    def summary(self, results):
        config, section = config_of(results), results[self.name]
        names, factors = results["models"], config.length_factors
        rows = []
        for model in MODELS:
            rows.append([names[model]["name"], str(config.length_pe_dim),
                         *length_cells(section["summary"], config, model=model),
                         fmt_spread(find(section["beyond_training"], model=model),
                                    "r2_beyond_T")])
        lines = [f"Held-out R^2, mean ± sd over {config.n_seeds} seeds, at every length "
                 f"from q={config.n_selected} to {max(factors)}T "
                 f"(length_generalisation.csv); here the named lengths and the mean "
                 f"over the lengths beyond T.", ""]
        lines += markdown_table(["model", "pe_dim"] + [f"{f}T" for f in factors]
                                + ["beyond T"], rows, ["l"] + ["r"] * (len(factors) + 2))
        lines += ["", "Held-out R^2 at 4T against pe_dim (length_vs_pe_dim.csv):", ""]
        pe_rows = []
        for model in ("paper", "ensemble"):
            for r in (x for x in section["by_pe_dim_summary"] if x["model"] == model):
                pe_rows.append([names[model]["name"], str(r["pe_dim"]),
                                fmt_spread(r, "r2_at_1T"), fmt_spread(r, "r2_at_4T")])
        lines += markdown_table(["model", "pe_dim", "R^2 at T", "R^2 at 4T"], pe_rows,
                                ["l", "r", "r", "r"])
        return lines

    def figures(self):
        return {"length_generalisation.png": plot_length_generalisation,
                "length_vs_pe_dim.png": plot_length_vs_pe_dim}


def plot_length_generalisation(results):
    """Held-out R^2 at every test length, with seed bands, for the three models.
    """
    plt = pyplot()
    config, section = config_of(results), results["length_generalisation"]
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    for model in MODELS:
        rows = select(section["summary"], "length", model=model)
        band(ax, [r["length"] for r in rows], rows, "r2", model=model,
             label=results["models"][model]["name"])
    length_axes(ax, config, section["summary"],
                title=f"Length generalisation, pe_dim={config.length_pe_dim}\n"
                      f"({task_title(config)})")
    legend_beside(ax)
    return fig


def plot_length_vs_pe_dim(results):
    """Held-out R^2 at 4T (and at T) against pe_dim, for one draw and the ensemble."""
    plt = pyplot()
    config, section = config_of(results), results["length_generalisation"]
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    for model in ("paper", "ensemble"):
        rows = select(section["by_pe_dim_summary"], "pe_dim", model=model)
        x = [r["pe_dim"] for r in rows]
        band(ax, x, rows, "r2_at_4T", model=model, errorbars=True,
             label=f"{results['models'][model]['name']}: at 4T")
        band(ax, x, rows, "r2_at_1T", model=model, errorbars=True, linestyle=":",
             alpha=0.6, label="... at T")
    ax.set_xscale("log")
    powers_of_two_ticks(ax.xaxis, [r["pe_dim"] for r in section["by_pe_dim_summary"]])
    ax.set(xlabel="pe_dim (d_p)", ylabel="held-out R^2",
           title=f"Length generalisation against d_p\n({task_title(config)})")
    legend_beside(ax)
    return fig


EXPERIMENT = LengthGeneralisation()
