"""The rules every verdict shares: the thresholds, the sets, the three outcomes, the gates.

``THRESHOLDS`` holds every number a verdict compares with, the same for every
run and recorded in every results file; ``SETS`` the day each set of verdicts
was fixed, before any run of it. ``RESOLUTION`` tells "inconclusive" apart:
a value within 2 standard errors of its threshold (R^2's taken as 2 (1 -
R^2) / sqrt(d n k) for n held-out sequences and k seeds); fewer than
``min_training_sequences`` (samples times epochs) for the paper's model; a
grid that does not reach what the claim needs; a critical width not
bracketed or moved by the doubling check; a slope whose bootstrap interval
over seeds holds its threshold.
"""

import math
from dataclasses import replace

from ...theory import fcn_lower_bound
from .._bracket import bracket_text
from .._config import PAPER
from .._experiment import architecture_seeds_text, fmt

#: the day the thresholds were fixed, before any run that judges them
FIXED_ON = "2026-12-01"
#: every number a verdict compares with, by name (the reproduction page's rules)
THRESHOLDS = {
    # 1, 6: width separation (on a fixed sample; on the population)
    "separation_margin": 0.1, "separation_pe_low": 1.0, "separation_pe_high": 4.0,
    "population_margin": 0.1,
    # 2: length generalisation
    "length_pe_dim": 256, "stochastic_r2_at_T": 0.9, "stochastic_r2_at_4T": 0.8,
    "fixed_r2_at_T": 0.9, "fixed_r2_at_4T": 0.3, "length_spearman": 0.9,
    "length_grid_values": 5, "length_grid_span": 16,
    # 3: alignment
    "alignment_final": 0.9,
    # 4 (second set): transformer width scaling against the best case (the paper
    # scale spans 32x or more)
    "scaling_target_r2": 0.8, "scaling_best_factor": 1.5, "scaling_lens": 5,
    "scaling_span": 16, "scaling_span_paper": 32, "scaling_refine": 2 ** 0.5,
    # 5: FCN tightness (its steps rule at every T: second set)
    "tightness_target_r2": 0.8, "tightness_max_factor": 4, "tightness_lens": 3,
    # the protocol of every critical width (second set): the learning-rate grid
    "lr_grid_values": 3, "lr_grid_span": 10,
    # 7 (second set): the query layout's separation; the no-PE encoder's sanity margin
    "query_target_r2": 0.8, "query_lens": 4, "query_span": 8,
    "query_encoder_max_slope": 0.6, "query_recurrent_min_slope": 0.6, "query_slope_lens": 3,
    "query_none_margin": 0.05,
    # 7 (third set): each rival searched up to at least this many times the encoder's width
    "query_rival_stop_factor": 4,
    # the fourth set's first rule: a non-monotone search is searched again with this many
    # times its steps (verdicts 4 and 5; its second rule moves no number)
    "search_again_steps": 2,
}
#: the day the second set (verdict 4 against the best case, the protocol) was fixed
SECOND_SET_FIXED_ON = "2026-12-01 (evening)"
#: how a run too small to resolve a threshold is told apart
RESOLUTION = {"standard_errors": 2.0, "min_training_sequences": 100_000,
              "bootstrap_level": 0.9}
#: the note of the verdicts of the second set
_SECOND_SET = "second set of verdicts (fixed " + SECOND_SET_FIXED_ON + ")"
#: the day the third set (the recipe of a decaying rate, verdict 7's ordering) was fixed
THIRD_SET_FIXED_ON = "2026-12-02"
_THIRD_SET = "third set of verdicts (fixed " + THIRD_SET_FIXED_ON + ")"
#: the day the fourth set (a non-monotone search searched again with twice the steps; an
#: unsettled width bounding verdicts 4 and 5) was fixed
FOURTH_SET_FIXED_ON = "2026-12-05"
_FOURTH_SET = "fourth set of verdicts (fixed " + FOURTH_SET_FIXED_ON + ")"
#: every set of verdicts and the day it was fixed (results.json records them)
SETS = {"first": FIXED_ON, "second": SECOND_SET_FIXED_ON, "third": THIRD_SET_FIXED_ON,
        "fourth": FOURTH_SET_FIXED_ON}
#: the set that judges a critical-width section, by its recorded protocol
_SETS = {"second set": _SECOND_SET, "third set": _THIRD_SET, "fourth set": _FOURTH_SET}
#: the statuses of a critical width the protocol could not settle
_UNSETTLED = ("unresolved", "non-monotone")


def _set_note(section):
    """The note naming the set that judges ``section`` (its searches' recipe)."""
    return _SETS.get(section.get("protocol", "second set"), _SECOND_SET)



def compare(value, threshold, se=0.0, *, at_least, z=RESOLUTION["standard_errors"]):
    """"pass", "fail" or "unresolved" (within ``z`` standard errors, or not a number).

    Examples
    --------
    >>> compare(0.85, 0.8, 0.01, at_least=True), compare(0.81, 0.8, 0.01, at_least=True)
    ('pass', 'unresolved')
    >>> compare(0.5, 0.3, at_least=False)
    'fail'
    """
    if value is None or not math.isfinite(value):
        return "unresolved"
    gap = value - threshold if at_least else threshold - value
    if se and abs(gap) <= z * se:
        return "unresolved"
    return "pass" if gap >= 0 else "fail"


def r2_se(r2, n, d, k=1):
    """Approximate standard error of a mean over ``k`` seeds of R^2 on ``n`` sequences."""
    return 2 * abs(1 - r2) / math.sqrt(d * n * k) if math.isfinite(r2) else math.nan


def verdict(name, *, model, statement, evidence, per_seed, gates=(), conditions=(),
            checks=(), note=None):
    """A verdict: a ``gates`` ``(ok, reason)`` not met makes it inconclusive; else any
    ``conditions`` ``(state, text)`` "fail" makes it not supported, any "unresolved"
    inconclusive. ``per_seed``: each seed's own outcome; ``checks``: ``(text, passed)``
    of what mathematics guarantees, reported apart."""
    reasons = [reason for ok, reason in gates if not ok]
    if reasons:
        outcome = "inconclusive"
    elif "fail" in [state for state, _ in conditions]:
        outcome = "not supported"
    else:
        reasons = [text for state, text in conditions if state == "unresolved"]
        outcome = "inconclusive" if reasons else "supported"
    return {"claim": name, "model": model, "statement": statement, "verdict": outcome,
            "supported": outcome == "supported", "inconclusive_reasons": reasons,
            "seeds_supporting": int(sum(bool(s) for s in per_seed)),
            "n_seeds": len(per_seed), "evidence": evidence, "note": note,
            "sanity_checks": [{"check": text, "passed": bool(ok)} for text, ok in checks]}


def _within_se(value, threshold, se, *, at_least, what, of, option):
    """``compare`` and why it can be unresolved (``of``: the threshold in words)."""
    return (compare(value, threshold, se, at_least=at_least),
            f"{what} is within 2 standard errors ({se:.3f}) of {of}: more held-out sequences "
            f"({option}) would decide")


def _training_gate(config, resolution, what="the paper's model"):
    seen = config.n_samples * config.paper_training.max_epochs
    need = resolution["min_training_sequences"]
    return (seen >= need,
            f"{what} trains on {config.n_samples} sequences x "
            f"{config.paper_training.max_epochs} epochs = {seen}, fewer than the {need} the "
            f"verdicts were fixed for: raise --n-samples to at least "
            f"{math.ceil(need / config.paper_training.max_epochs)}")


def _target_gate(section, target, searches="search's"):
    """The critical-width searches were run at the verdict's target R^2."""
    return (section["target_r2"] == target,
            f"the {searches} target R^2 {section['target_r2']} is not the verdict's {target}")


def _lens_gate(what, lens, n, span=None, hint=""):
    """``what`` is measured at at least ``n`` values ``lens`` of T (spanning ``span``x)."""
    have = lens[-1] / lens[0] if lens else 0
    spanning = (f" spanning {have:.0f}x", f" spanning {span}x") if span is not None else ("", "")
    return (len(lens) >= n and (span is None or have >= span),
            f"{what} at {len(lens)} values of T{spanning[0]}; the verdict needs at least "
            f"{n}{spanning[1]}{hint}")


def _grid_gate(config, family, t):
    """The protocol's rate grid: at least ``lr_grid_values`` rates spanning ``lr_grid_span``x."""
    rates = sorted(config.lr_grid(family))
    span = rates[-1] / rates[0]
    return (len(set(rates)) >= t["lr_grid_values"] and span >= t["lr_grid_span"] * (1 - 1e-9),
            f"the {family} searches' learning-rate grid {rates} has {len(set(rates))} "
            f"rates spanning {span:.3g}x; the protocol needs at least {t['lr_grid_values']} "
            f"spanning {t['lr_grid_span']}x (lr_grids)")


def _unsettled(row, what):
    """A condition for a row the protocol could not settle (``_UNSETTLED``)."""
    return ("unresolved", f"at T={row['seq_len']} {what} is {row['status']}: {row['reason']}; "
            + ("more steps (sequences per epoch or epochs) would decide"
               if row["status"] == "unresolved" else
               "a training that does not lose accuracy as the width grows would decide"))


def _own_stars(section):
    """``{(seed, T): that seed's own critical width}`` of a critical-width section."""
    return {(p["seed"], p["seq_len"]): p["star"] for p in section["critical_per_seed"]}


def _search_evidence(row, unchecked="", status=None):
    """A critical width's search in words (``status``: its status as the verdict reads it,
    by default the row's), to its scores with twice the steps."""
    doubled = ", ".join(f"{v:.3f} at {w}" for w, v in row["doubled_scores"].items())
    return (f"{status or row['status']}, bracket {bracket_text(row)}, rate "
            f"{fmt(row['lr_at_star'], 'g')}, held-out R^2 {fmt(row['test_r2_mean'])}; with "
            f"twice the steps {doubled or unchecked}")


def _points_above_bound(config, points):
    """Per FCN fit of a search: at or above its bound within 3 standard errors of its loss."""
    return [p["test_loss"] >= fcn_lower_bound(p["seq_len"], config.n_selected,
                                              token_dim=config.token_dim, width=p["value"])
            - 3 * p.get("test_loss_se", 0) for p in points if not math.isnan(p["test_loss"])]


def _bound_check(which, above):
    """The sanity check that every FCN ``which`` is ``above`` its bound."""
    return (f"every FCN {which} sits at or above its bound (within 3 standard errors of its "
            f"held-out loss): {sum(above)} of {len(above)} fits", all(above))




def is_paper_scale(config):
    """Whether ``config`` is the paper preset (up to seeds and where it runs)."""
    where = ("n_seeds", "seed", "n_jobs", "device", "experiments")
    return replace(config, **{k: getattr(PAPER, k) for k in where}) == PAPER


def _with_seeds(note, config):
    """Verdict 7's ``note`` and, where the architectures experiment takes fewer seeds than
    the run (``architecture_n_seeds``), which and why."""
    fewer = architecture_seeds_text(config)
    return f"{note}{'' if note.endswith('.') else '.'} {fewer}" if fewer else note
