"""Verdicts 4 and 5: the transformer's pe_dim* against the best case, the FCN's m* against 4 T d.

Both claim an upper bound on a critical width, found at every T by the
searches of :mod:`.._bracket`. Under the fourth set of verdicts two rules are
added to the third set's recipe: a T whose search has a width failing where a
narrower one passed is searched again with twice the steps, whose result
replaces the first (the searches do that: :func:`.._bracket.fourth_set`); and
a T whose width is unsettled (the steps check finds a narrower width passing
with twice the steps) still counts when the width found at the base steps meets
the threshold, since more steps have only lowered widths in every check made so
far: "unsettled, bound met" (:func:`_unsettled_bound`). Where it does not
meet it, the T is unresolved, as before.
"""

import math

from .._bracket import bracket_text, schedule_text, steps_text
from .._experiment import config_of, fmt, loglog_slope, zero_loss
from ._rules import (
    _UNSETTLED,
    RESOLUTION,
    _grid_gate,
    _lens_gate,
    _own_stars,
    _points_above_bound,
    _search_evidence,
    _set_note,
    _target_gate,
    _unsettled,
    is_paper_scale,
    verdict,
)

#: how the evidence and the tables show a T the fourth set's second rule counts
BOUND_MET = "unsettled, bound met"


def _fourth(section):
    """Whether the fourth set judges ``section`` (its searches' recorded protocol)."""
    return section.get("protocol") == "fourth set"


def _unsettled_bound(section, row):
    """The fourth set's second rule: the width found at the base steps of a row whose
    steps check found a narrower width passing with twice the steps (the searches'
    ``upper_bound`` of an unsettled width), which bounds the requirement from above;
    None where the rule does not apply (another set, a settled width, or one not
    bounded: non-monotone, or failing with twice the steps)."""
    if not _fourth(section) or row["status"] not in _UNSETTLED or row.get("settled", False):
        return None
    return row.get("upper_bound")


def _unsettled_condition(section, row, what, limit, of):
    """The condition of an unsettled row: passes where the fourth set's bound is at most
    ``limit`` (``of``, in words), else as :func:`_not_met` says."""
    bound = _unsettled_bound(section, row)
    if bound is not None and bound <= limit:
        return ("pass", "")
    return _not_met(row, what, bound, limit, of)


def _not_met(row, what, bound, limit, of):
    """The condition of an unsettled row whose bound (if any) misses the threshold."""
    state, text = _unsettled(row, what)
    if bound is not None:
        text += (f" (the fourth set's bound: its {what} at the base steps, {bound}, is above "
                 f"{of} = {limit:.1f})")
    return state, text


def _status_text(section, row, limit):
    """A row's search in the evidence: "unsettled, bound met" where the fourth set counts
    it, else its status; the steps it used, and the first search where there were two."""
    bound = _unsettled_bound(section, row)
    status = BOUND_MET if bound is not None and bound <= limit else row["status"]
    steps = f", {row['steps']} steps" if row.get("steps") is not None else ""
    again = (f"; searched again with twice the steps, the first search ({row['first_steps']} "
             f"steps) {row['first_status']}: {row['first_reason']}"
             if row.get("searched_again") else "")
    return status + steps + again


def _rules_text(section, what, threshold):
    """The fourth set's two rules in a statement, for a section they judge."""
    if not _fourth(section):
        return ""
    return (f"; a T whose search has a width failing where a narrower one passed is searched "
            f"again with twice the steps, and a T whose {what} is unsettled (a narrower width "
            f"passes with twice the steps) counts when its {what} at the base steps is "
            f"<= {threshold} (\"{BOUND_MET}\")")


def _scaling_condition(section, x, factor, target):
    """Verdict 4 at one T: pe_dim* against ``factor`` x pe_dim_best."""
    limit = factor * x["pe_dim_best"]
    if x["status"] in _UNSETTLED:
        return _unsettled_condition(section, x, "pe_dim*", limit, f"{factor} x pe_dim_best")
    if x["status"] == "> stop":
        return ("fail" if x["lower"] >= limit else "unresolved",
                f"at T={x['seq_len']} no pe_dim up to {x['lower']} reaches {target}, below "
                f"{factor} x pe_dim_best = {limit:.1f}: raise scaling_pe_stop")
    if x["star"] <= limit:
        return ("pass", "")
    if x["lower"] is not None and x["lower"] >= limit:
        return ("fail", "")
    return ("unresolved",
            f"at T={x['seq_len']} the bracket {bracket_text(x)} holds {factor} x pe_dim_best "
            f"= {limit:.1f}: a finer bracket would decide"
            + (" (lower scaling_pe_floor)" if x["lower"] is None else ""))


def _below_fcn(section, x, f, d):
    """Verdict 4 at one T: d + pe_dim* below the FCN's m* (``f``), None where not both
    are measured. Under the fourth set an unsettled pe_dim* is an upper bound: it can
    pass, never fail."""
    if f is None or x["star"] is None or f["status"] in _UNSETTLED:
        return None
    width = d + x["star"]
    exact = not _fourth(section) or x["status"] not in _UNSETTLED
    if f["star"] is not None:
        # m* lies in (lower, star]: below it for sure at or under lower
        return ("pass" if f["lower"] is not None and width <= f["lower"] else
                "fail" if width >= f["star"] and exact else "unresolved",
                f"at T={x['seq_len']} d + pe_dim* = {width} lies in the FCN's bracket "
                f"{bracket_text(f)}")
    # the FCN is "> stop": wider than its stop, a measurement
    return ("pass" if width <= f["lower"] else "unresolved",
            f"at T={x['seq_len']} d + pe_dim* = {width} is above the widest FCN fitted "
            f"({f['lower']}), which fails")


def _scaling(results, t, r):
    config, s = config_of(results), results["width_scaling"]
    d, q, rows = config.token_dim, config.n_selected, s["critical"]
    lens = [x["seq_len"] for x in rows]
    need_span = t["scaling_span_paper"] if is_paper_scale(config) else t["scaling_span"]
    factor = t["scaling_best_factor"]
    fcn = {x["seq_len"]: x for x in results.get("fcn_tightness", {}).get("critical", [])}
    gates = [_target_gate(s, t["scaling_target_r2"]),
             _lens_gate("pe_dim*", lens, t["scaling_lens"], need_span,
                        (" (the paper scale)" if need_span == t["scaling_span_paper"] else "")
                        + " (e.g. T = 8, 16, 32, 64, 128" + (", 256)" if need_span > 16 else ")")),
             _grid_gate(config, "transformer", t)]
    conditions = []
    for x in rows:
        conditions.append(_scaling_condition(s, x, factor, s["target_r2"]))
        below = _below_fcn(s, x, fcn.get(x["seq_len"]), d)
        if below is not None:
            conditions.append(below)
    own = _own_stars(s)
    per_seed = [bool(rows) and all(own.get((seed, x["seq_len"])) is not None
                                   and own[seed, x["seq_len"]] <= factor * x["pe_dim_best"]
                                   for x in rows) for seed in config.seeds()]
    log_slope = loglog_slope(lens, [math.log(T) for T in lens]) if len(lens) > 1 else None
    slope, (low, high) = s["slope"], s["slope_interval"]
    evidence = ("; ".join(
        f"T={x['seq_len']}: pe_dim* {x['star'] or ('> ' + str(x['lower']) if x['lower'] else '-')}"
        f" ({_search_evidence(x, 'not checked', _status_text(s, x, factor * x['pe_dim_best']))}"
        f"), pe_dim_best {x['pe_dim_best']} (ratio "
        f"{fmt(x['star_over_best'], '.2f')})" for x in rows)
        + f". Reported, not judged: slope of log pe_dim* {fmt(slope, '.2f')}"
        + (f" ({RESOLUTION['bootstrap_level']:.0%} bootstrap interval over seeds "
           f"[{low:.2f}, {high:.2f}])" if low is not None else "")
        + f", of log pe_dim_best {fmt(s.get('best_slope'), '.2f')}; over these T: q log T "
        + f"{fmt(log_slope, '.2f')}, (q log T)^2 " + fmt(log_slope and 2 * log_slope, ".2f")
        + ", T 1.00"
        + "".join(f"; T={T}: d + pe_dim* {d + x['star']} against the FCN's m* "
                  f"{fcn[T]['star'] or '> ' + str(fcn[T]['lower'])}"
                  for x in rows for T in [x["seq_len"]] if T in fcn and x["star"]))
    return verdict(
        "transformer width scaling", model=s["model_name"],
        statement=(f"At every T of the run (at least {t['scaling_lens']} values spanning at "
                   f"least {need_span}x), pe_dim* (the smallest pe_dim whose best-rate mean "
                   f"validation R^2 reaches {t['scaling_target_r2']}, steps checked at every "
                   f"T) is <= {factor} x pe_dim_best, the best case W = c I at its best c "
                   f"with fresh draws per sequence (q = {q}, no training); and d + pe_dim* "
                   "is below the FCN's m* at every T where both are measured"
                   + _rules_text(s, "pe_dim*", f"{factor} x pe_dim_best") + "."),
        evidence=evidence, per_seed=per_seed, gates=gates, conditions=conditions,
        note=_set_note(s) + _steps_note(s))


def _steps_note(section):
    """The steps and the schedule of a section's searches, in words."""
    return "; " + schedule_text(section) + "; steps per T: " + steps_text(section)


def _tightness_condition(section, x, factor):
    """Verdict 5 at one T: m* against ``factor`` T d."""
    limit = factor * x["td"]
    if x["status"] in _UNSETTLED:
        return _unsettled_condition(section, x, "m*", limit, f"{factor} T*d")
    # "> stop" (no star): the widest fails with twice the steps too
    return ("pass" if x["star"] is not None and x["star"] <= limit else "fail", "")


def _tightness(results, t, r):
    config, s = config_of(results), results["fcn_tightness"]
    rows, factor = s["critical"], t["tightness_max_factor"]
    gates = [_target_gate(s, t["tightness_target_r2"]),
             _lens_gate("m*", [x["seq_len"] for x in rows], t["tightness_lens"]),
             _grid_gate(config, "fcn", t)]
    conditions = [_tightness_condition(s, x, factor) for x in rows]
    own = _own_stars(s)
    per_seed = [all(own.get((seed, x["seq_len"])) is not None for x in rows)
                for seed in config.seeds()]
    above = _points_above_bound(config, s["points"])
    check = (f"no FCN goes below its bound (held-out loss within 3 standard errors): "
             f"{sum(above)} of {len(above)} fits; m* is at least the narrowest width whose "
             "bound allows the target (" + ", ".join(
                 f"T={x['seq_len']}: {x['bound_width']}" for x in rows) + ")",
             all(above) and all(x["star"] is None or x["star"] >= x["bound_width"]
                                for x in rows))
    evidence = "; ".join(
        f"T={x['seq_len']} (T*d={x['td']}): m* "
        + (f"{x['star']} = {x['star_over_td']:.2f} T*d ("
           f"{_search_evidence(x, status=_status_text(s, x, factor * x['td']))})"
           if x["star"] is not None else f"> {x['lower']} ({x['status']}: {x['reason']})")
        + f"; the bound's width {x['bound_width']} = {x['bound_over_td']:.2f} T*d"
        for x in rows) + f" (R^2 0 = loss {zero_loss(config):.3f})"
    return verdict(
        "FCN tightness", model=s["model_name"],
        statement=(f"Trained on the population (fresh sequences every epoch, the best of a "
                   f"learning-rate grid, steps checked by doubling them at every T), the "
                   f"FCN's m* (the smallest width whose mean validation R^2 reaches "
                   f"{t['tightness_target_r2']}) is <= {factor} T*d at every T of the run "
                   f"(at least {t['tightness_lens']})"
                   + _rules_text(s, "m*", f"{factor} T*d") + "."),
        evidence=evidence, per_seed=per_seed, gates=gates, conditions=conditions,
        checks=[check], note="steps rule at every T: " + _set_note(s) + _steps_note(s))
