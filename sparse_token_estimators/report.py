"""The report of a reproduction: each claim's verdict, the results file, tables, summary.

Reads the results dict of :func:`sparse_token_estimators.reproduce.run`; the
claims are those of Wang, Wei, Hsu & Lee, "Transformers Provably Learn Sparse
Token Selection While Fully-Connected Nets Cannot" (ICML 2024,
arXiv:2406.06893), on the q-sparse averaging task of Sanford, Hsu & Telgarsky
(NeurIPS 2023, arXiv:2306.02896).
"""

import csv
import json
import math
from pathlib import Path

from .plotting import FIGURES, save_figures
from .theory import transformer_pe_scale

#: the figures the issue asks a run to show (claims and their thresholds)
THRESHOLDS = {
    "separation_transformer_r2": 0.85,  # at a width below T d
    "separation_fcn_r2": 0.6,  # at the same width
    "separation_fcn_fits_r2": 0.85,  # once much wider than T d ...
    "separation_much_wider": 4,  # ... meaning at least this many times T d
    "stochastic_r2_at_T": 0.93,
    "stochastic_r2_at_4T": 0.9,
    "fixed_r2_at_T": 0.9,
    "fixed_r2_at_4T": 0.3,
    "alignment_final": 0.9,
}


# -- verdicts -------------------------------------------------------------------------


def _r2(rows, **match):
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            return row["test_r2"]
    return float("nan")


def assess_claims(results, thresholds=THRESHOLDS):
    """State each claim and whether the numbers in ``results`` support it.

    Returns a list of dicts with ``claim``, ``statement``, ``supported``
    (bool) and ``evidence`` (the numbers the verdict rests on). ``run``
    calls it with the issue's ``THRESHOLDS``; pass others to judge the same
    numbers by other standards.

    Examples
    --------
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> results = run(SMOKE, progress=False)
    >>> lenient = dict(THRESHOLDS, alignment_final=-1.0)
    >>> [c["supported"] for c in assess_claims(results, lenient) if c["claim"] == "alignment"]
    [True]
    """
    t = thresholds
    theory = results["theory"]
    threshold = theory["fcn_width_threshold"]
    sep = results["width_separation"]
    by_width = {}
    for row in sep:
        by_width.setdefault(row["width"], {})[row["model"]] = row["test_r2"]
    below = [(w, r) for w, r in sorted(by_width.items())
             if w < threshold and len(r) == 2
             and r["transformer"] >= t["separation_transformer_r2"]
             and r["fcn"] <= t["separation_fcn_r2"]]
    wide = [(w, r["fcn"]) for w, r in sorted(by_width.items())
            if w >= t["separation_much_wider"] * threshold and "fcn" in r]
    fcn_fits = [w for w, r2 in wide if r2 >= t["separation_fcn_fits_r2"]]
    claims = [{
        "claim": "width separation",
        "statement": (
            f"At equal width below T*d = {threshold}, the transformer fits "
            f"(R^2 >= {t['separation_transformer_r2']}) while the FCN does not "
            f"(R^2 <= {t['separation_fcn_r2']}); the FCN fits (R^2 >= "
            f"{t['separation_fcn_fits_r2']}) once at least "
            f"{t['separation_much_wider']}x wider than T*d."
        ),
        "supported": bool(below) and bool(fcn_fits),
        "evidence": (
            "widths below T*d where it holds: "
            + (", ".join(f"{w} (transformer {r['transformer']:.3f}, FCN {r['fcn']:.3f})"
                         for w, r in below) or "none")
            + "; FCN at widths >= "
            + f"{t['separation_much_wider']}*T*d: "
            + (", ".join(f"{w}: {r2:.3f}" for w, r2 in wide) or "none searched")
        ),
    }]

    lg = results["length_generalisation"]
    s1, s4 = _r2(lg, encoding="stochastic", factor=1), _r2(lg, encoding="stochastic", factor=4)
    f1, f4 = _r2(lg, encoding="fixed", factor=1), _r2(lg, encoding="fixed", factor=4)
    claims.append({
        "claim": "length generalisation",
        "statement": (
            f"Trained at T, the stochastic-PE transformer keeps R^2 >= "
            f"{t['stochastic_r2_at_T']} at T and >= {t['stochastic_r2_at_4T']} at 4T; "
            f"the fixed-PE transformer fits at T (R^2 >= {t['fixed_r2_at_T']}) but "
            f"fails at 4T (R^2 <= {t['fixed_r2_at_4T']})."
        ),
        "supported": (s1 >= t["stochastic_r2_at_T"] and s4 >= t["stochastic_r2_at_4T"]
                      and f1 >= t["fixed_r2_at_T"] and f4 <= t["fixed_r2_at_4T"]),
        "evidence": (f"stochastic R^2 {s1:.3f} at T, {s4:.3f} at 4T; "
                     f"fixed R^2 {f1:.3f} at T, {f4:.3f} at 4T"),
    })

    curve = [r["alignment"] for r in results["alignment"] if r["encoding"] == "stochastic"]
    fixed_curve = [r["alignment"] for r in results["alignment"] if r["encoding"] == "fixed"]
    claims.append({
        "claim": "alignment",
        "statement": (
            "During training the stochastic-PE transformer's W aligns with the "
            f"identity: the alignment rises to >= {t['alignment_final']}."
        ),
        "supported": bool(curve) and curve[-1] >= t["alignment_final"] and curve[-1] > curve[0],
        "evidence": (
            f"stochastic: {curve[0]:.3f} after epoch 1, {max(curve):.3f} at best, "
            f"{curve[-1]:.3f} at the end; fixed: {fixed_curve[-1]:.3f} at the end"
            if curve and fixed_curve else "no alignment recorded"
        ),
    })

    minimal = results["width_scaling"]["minimal"]
    fcn_min = {r["seq_len"]: r["minimal_width"] for r in minimal if r["model"] == "fcn"}
    pe_min = {r["seq_len"]: r["minimal_width"] for r in minimal if r["model"] == "transformer"}
    lens = sorted(fcn_min)
    d = results["config"]["token_dim"]
    # A width the grid never reached counts as beyond its largest value.
    fcn_eff = [fcn_min[T] if fcn_min[T] is not None else math.inf for T in lens]
    pe_ok = all(pe_min[T] is not None for T in lens)
    narrower = pe_ok and all(d + pe_min[T] < fcn_eff[i] for i, T in enumerate(lens))
    grows = len(lens) >= 2 and fcn_eff[-1] > fcn_eff[0]
    claims.append({
        "claim": "width scaling",
        "statement": (
            f"The smallest FCN width reaching held-out R^2 >= "
            f"{results['width_scaling']['target_r2']} grows with T (as T*d), while "
            "the transformer needs a smaller width d + pe_dim at every T (pe_dim of "
            "order q log T)."
        ),
        "supported": bool(narrower and grows),
        "evidence": "; ".join(
            f"T={T}: FCN {fcn_min[T] if fcn_min[T] is not None else 'not reached'} "
            f"(T*d={T * d}), transformer pe_dim "
            f"{pe_min[T] if pe_min[T] is not None else 'not reached'} "
            f"(q log T={transformer_pe_scale(T, results['config']['n_selected']):.1f})"
            for T in lens
        ),
    })
    return claims


#: CSV file -> where its rows live in the results dict
TABLES = {
    "width_separation.csv": ("width_separation",),
    "length_generalisation.csv": ("length_generalisation",),
    "alignment.csv": ("alignment",),
    "width_scaling_points.csv": ("width_scaling", "points"),
    "width_scaling.csv": ("width_scaling", "minimal"),
}


def _write_csv(path, rows):
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def write_outputs(results, out_dir, *, plots=True):
    """Write results.json, one CSV per table, the figures and summary.md.

    Returns the list of paths written.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE, run
    >>> with tempfile.TemporaryDirectory() as out:
    ...     sorted(p.name for p in write_outputs(run(SMOKE, progress=False), out, plots=False))
    ['alignment.csv', 'length_generalisation.csv', 'results.json', 'summary.md', 'width_scaling.csv', 'width_scaling_points.csv', 'width_separation.csv']
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json"]
    written[0].write_text(json.dumps(results, indent=2, default=float))
    for name, keys in TABLES.items():
        rows = results
        for key in keys:
            rows = rows[key]
        _write_csv(out / name, rows)
        written.append(out / name)
    if plots:
        written += save_figures(results, out)
    summary = out / "summary.md"
    summary.write_text(summary_markdown(results, figures=plots))
    written.append(summary)
    return written


def _fmt(value, spec=".3f"):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def summary_markdown(results, *, figures=True):
    """The Markdown summary: each claim, its verdict and evidence, the tables.

    ``write_outputs`` writes it as summary.md (see its example).
    """
    cfg, theory = results["config"], results["theory"]
    lines = [
        "# Sparse token selection: reproduction summary",
        "",
        f"Task: T={cfg['seq_len']} tokens of dimension d={cfg['token_dim']}, "
        f"q={cfg['n_selected']} selected; {cfg['n_samples']} training and "
        f"{cfg['n_test']} held-out sequences; seed {cfg['seed']}; "
        f"{results['elapsed_s']:.0f} s. Estimators at their defaults; losses are "
        "squared errors summed over the d coordinates (predicting 0 scores "
        f"{theory['zero_predictor_loss']:.3f}, uniform attention "
        f"{theory['uniform_attention_loss']:.3f}; the FCN lower bound below "
        f"width T*d = {theory['fcn_width_threshold']} is "
        f"{theory['fcn_lower_bound']:.4f}).",
        "",
        "Wang, Wei, Hsu & Lee, *Transformers Provably Learn Sparse Token Selection "
        "While Fully-Connected Nets Cannot* (ICML 2024, arXiv:2406.06893); task of "
        "Sanford, Hsu & Telgarsky (NeurIPS 2023, arXiv:2306.02896).",
        "",
        "## Claims",
        "",
    ]
    for claim in results["claims"]:
        verdict = "supported" if claim["supported"] else "NOT supported"
        lines += [f"- **{claim['claim']}: {verdict} by this run.** {claim['statement']}",
                  f"  Evidence: {claim['evidence']}."]
    lines += ["", "## Width separation (held-out, at equal width)", "",
              "| width | FCN loss | FCN R^2 | transformer loss | transformer R^2 |",
              "|---:|---:|---:|---:|---:|"]
    by_width = {}
    for row in results["width_separation"]:
        by_width.setdefault(row["width"], {})[row["model"]] = row
    for width, models in sorted(by_width.items()):
        f, t = models.get("fcn", {}), models.get("transformer", {})
        lines.append(f"| {width} | {_fmt(f.get('test_loss'))} | {_fmt(f.get('test_r2'))} "
                     f"| {_fmt(t.get('test_loss'))} | {_fmt(t.get('test_r2'))} |")
    lines += ["", "## Length generalisation (held-out R^2)", "",
              "| encoding | " + " | ".join(f"{f}T" for f in cfg["length_factors"]) + " |",
              "|---|" + "---:|" * len(cfg["length_factors"])]
    for enc in ("stochastic", "fixed"):
        cells = [_fmt(_r2(results["length_generalisation"], encoding=enc, factor=f))
                 for f in cfg["length_factors"]]
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    lines += ["", f"## Width scaling (smallest width reaching held-out R^2 >= "
              f"{results['width_scaling']['target_r2']})", "",
              "| T | FCN width | T*d | transformer pe_dim | q log T |",
              "|---:|---:|---:|---:|---:|"]
    minimal = results["width_scaling"]["minimal"]
    for T in sorted({r["seq_len"] for r in minimal}):
        f = next(r for r in minimal if r["seq_len"] == T and r["model"] == "fcn")
        t = next(r for r in minimal if r["seq_len"] == T and r["model"] == "transformer")

        def cell(r):
            return str(r["minimal_width"]) if r["minimal_width"] is not None \
                else f"> {r['grid_max']}"

        lines.append(f"| {T} | {cell(f)} | {f['fcn_width_threshold']} | {cell(t)} "
                     f"| {t['pe_scale']:.1f} |")
    if figures:
        lines += ["", "## Figures", ""] + [f"![{name[:-4]}]({name})" for name in FIGURES]
    return "\n".join(lines) + "\n"
