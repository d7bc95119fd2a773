"""Verdict 7: the query layout's separation (beyond the paper), by the second and third sets.

In the query layout the subset is given as q rows of positions, so an
architecture must match positions. The second set orders the best positional
encoder's width below every rival's and asks for slopes (the recurrent nets'
beyond a CPU run's steps); the third (:func:`_query_separation_third`) keeps
the encoder's slope and replaces the rivals' by the ordering within the run's
steps: each rival fails up to several times the encoder's width. The fourth
set's second rule does not apply to it: a rival reaching the target with twice
the steps is reported, as before.
"""

import math
from functools import partial

from .._bracket import bracket_text
from .._experiment import config_of, fmt, loglog_slope, select
from ._rules import (
    _SECOND_SET,
    _THIRD_SET,
    _bound_check,
    _grid_gate,
    _lens_gate,
    _points_above_bound,
    _target_gate,
    _with_seeds,
    verdict,
)

#: the best positional encoder's rivals (model, in the evidence, in a reason)
_RIVALS = (("query_gru", "GRU", "the GRU"), ("query_lstm", "LSTM", "the LSTM"),
           ("query_fcn", "FCN", "the FCN's m*"))


def _query_width(row):
    """A query-layout row's compared width (d + pe_dim for the paper's model): the width
    found, the stop for "> stop" (the ordering's rule), None where unsettled."""
    offset = row.get("width_offset", 0)
    if row["status"] == "found":
        return offset + row["star"]
    if row["status"] == "> stop":
        return offset + row["lower"]
    return None


def _encoder_bound(row, target):
    """An encoder row's width for the ordering: ``(width, exact)``. Exact: the width found,
    or the stop for "> stop"; a bound: an unresolved width that reaches the target with
    twice the steps too (more steps can then only narrow it); None where neither."""
    width = _query_width(row)
    if width is not None:
        return width, True
    star = row["star"]
    if row["status"] == "unresolved" and star and \
            row["doubled_scores"].get(str(star), -math.inf) >= target:
        return row.get("width_offset", 0) + star, False
    return None


def _below(best, exact, other, what, T):
    """The condition "the best encoder's width ``best`` is below ``other``'s" at T
    (``exact``: ``best`` is a measured width, not an upper bound)."""
    width = _query_width(other)
    if width is not None:
        if best < width:
            return ("pass", "")
        return ("fail" if exact else "unresolved",
                f"at T={T} the best encoder's width is at most {best} (unresolved) and "
                f"{what} is {_star_or_stop(other)}: more steps would decide")
    lower = other["lower"]
    return ("pass" if lower is not None and best <= lower else "unresolved",
            f"at T={T} {what} is {other['status']} ({other['reason']}), and the best "
            f"encoder's width {best} is not at or below its bracket's lower end "
            f"{lower or '-'}: more steps would decide")


def _star_or_stop(row):
    """A query row's compared width in words: the width, "> stop", or its status."""
    width = _query_width(row)
    if width is None:
        return row["status"]
    return str(width) if row["status"] == "found" else f"> {width}"


def _query_separation(results, t, r):
    config, s = config_of(results), results["architectures"]
    rows = [x for x in s["critical"] if x.get("layout") == "query"]
    lens = sorted({x["seq_len"] for x in rows})
    by = {}
    for x in rows:
        by.setdefault(x["model"], {})[x["seq_len"]] = x
    encoders = [m for m in by if m.startswith("query_encoder_") and m != "query_encoder_none"]
    need = {"an encoder with a positional encoding": encoders, "the GRU": ["query_gru"],
            "the LSTM": ["query_lstm"], "the FCN": ["query_fcn"]}
    gates = [_target_gate(s, t["query_target_r2"], "searches'"),
             _lens_gate("the query layout's widths", lens, t["query_lens"], t["query_span"],
                        " (query_lens, e.g. 8, 16, 32, 64)")]
    gates += [(all(m in by and set(by[m]) == set(lens) for m in models) and bool(models),
               f"{what} is not searched at every T of the query layout (query_searched)")
              for what, models in need.items()]
    gates += [_grid_gate(config, family, t) for family in ("encoder", "rnn", "fcn")]
    judged = partial(
        verdict, "query-layout separation",
        model="the query layout's architectures (beyond the paper)", gates=gates,
        note=_with_seeds(_SECOND_SET, config),
        statement=(f"In the query layout (the subset given as q rows of positions), at every T "
                   f"of the run (at least {t['query_lens']} values spanning at least "
                   f"{t['query_span']}x): the smallest width (mean validation R^2 "
                   f"{t['query_target_r2']}, the protocol of the second set) of the best "
                   "encoder with a positional encoding is below that of the GRU, of the LSTM, "
                   "and the FCN's m*; over the T, the log-log slope of the best positional "
                   f"encoder's width is <= {t['query_encoder_max_slope']}, those of the GRU and "
                   f"the LSTM are >= {t['query_recurrent_min_slope']} (a width \"> stop\" "
                   "counts as the stop for the ordering; a slope needs "
                   f"{t['query_slope_lens']} T where the width is found)."))
    if not all(ok for ok, _ in gates):
        return judged(evidence="not measured",
                      per_seed=[False for _ in config.architecture_seeds()])
    conditions, best, evidence = [], {}, []
    for T in lens:
        bounds = {m: _encoder_bound(by[m][T], s["target_r2"]) for m in encoders}
        bounds = {m: b for m, b in bounds.items() if b is not None}
        if not bounds:
            conditions.append(("unresolved", f"at T={T} no encoder with a positional "
                               "encoding has a settled width: more steps would decide"))
            continue
        # the narrowest; a measured width before a bound of the same value
        winner = min(bounds, key=lambda m: (bounds[m][0], not bounds[m][1]))
        width, exact = bounds[winner]
        best[T] = (winner, width, by[winner][T]["status"])
        conditions += [_below(width, exact, by[m][T], what, T) for m, _, what in _RIVALS]
        short_name = results["models"][winner]["name"].split(" (")[0]
        evidence.append(f"T={T}: best positional encoder {short_name} "
                        + (_star_or_stop(by[winner][T]) if exact else
                           f"<= {width} (unresolved: {by[winner][T]['reason']})")
                        + "; " + ", ".join(f"{short} {_star_or_stop(by[m][T])}"
                                           for m, short, _ in _RIVALS)
                        + (f", paper's model d + pe_dim* {_star_or_stop(by['query_paper'][T])}"
                           if T in by.get("query_paper", {}) else ""))

    def found(model):
        """``{T: width}`` where ``model``'s width is found."""
        return {T: _query_width(by[model][T]) for T in lens if by[model][T]["status"] == "found"}

    slopes = {}
    for key, widths, holds in (
            ("best positional encoder",
             {T: width for T, (_, width, status) in best.items() if status == "found"},
             lambda slope: slope <= t["query_encoder_max_slope"]),
            ("GRU", found("query_gru"), lambda slope: slope >= t["query_recurrent_min_slope"]),
            ("LSTM", found("query_lstm"), lambda slope: slope >= t["query_recurrent_min_slope"])):
        slopes[key] = None
        if len(widths) < t["query_slope_lens"]:
            conditions.append(("unresolved", f"the {key}'s width is found at {len(widths)} T "
                               f"({', '.join(map(str, widths)) or 'none'}); a slope needs "
                               f"{t['query_slope_lens']}: more steps (architecture_n_train, "
                               "architecture_training's epochs) or, beyond the stop, a wider "
                               "query_width_stop would decide"))
            continue
        slopes[key] = loglog_slope(list(widths), list(widths.values()))
        conditions.append(("pass" if holds(slopes[key]) else "fail", ""))
    evidence.append("log-log slopes over the T where found: " + ", ".join(
        f"{k} {fmt(v, '.2f')}" for k, v in slopes.items()))
    checks = _query_checks(config, s, t)
    return judged(evidence="; ".join(evidence), conditions=conditions, checks=checks,
                  per_seed=_query_per_seed(config, s, by, encoders, lens))


def _query_checks(config, s, t):
    """The query layout's two checks: the encoder without positional encoding stays at
    chance, and the query FCN's points are above the bound."""
    none_ok = [x["test_r2"] <= x["ceiling"] + t["query_none_margin"]
               for x in s.get("query_sanity", [])]
    above = _points_above_bound(config, select(s["points"], model="query_fcn"))
    return [(f"the encoder without positional encoding never exceeds held-out R^2 q/T + "
             f"{t['query_none_margin']} (it is symmetric in the token rows): {sum(none_ok)} "
             f"of {len(none_ok)} fits", bool(none_ok) and all(none_ok)),
            _bound_check("of the query layout", above)]


def _query_per_seed(config, s, by, encoders, lens,
                    rivals=tuple(m for m, _, _ in _RIVALS)):
    """Each seed's own ordering at every T (its own smallest widths; not reached: the
    widest width searched)."""
    own = {(p["model"], p["seq_len"], p["seed"]): p["star"] for p in s["critical_per_seed"]}

    def width(model, T, seed):
        row, star = by[model][T], own.get((model, T, seed))
        return row.get("width_offset", 0) + (star if star else max(row["evaluated"]))

    return [all(min(width(m, T, seed) for m in encoders)
                < min(width(rival, T, seed) for rival in rivals)
                for T in lens) for seed in config.architecture_seeds()]


def _found_or_bounded(row, target):
    """An encoder row's width in the third set: ``(width, exact)``: found (exact), or
    unresolved but reaching the target with twice the steps too (an upper bound); None
    otherwise ("> stop" bounds it from below only)."""
    bound = _encoder_bound(row, target)
    return None if bound is None or row["status"] == "> stop" else bound


def _short(results, model):
    return results["models"][model]["name"].split(" (")[0] if model in results["models"] \
        else model


def _rival_condition(results, row, width, exact, factor, T):
    """Verdict 7b for one rival at T against the best encoder's ``width``: ``(state,
    text)`` and what the evidence reports of it."""
    name, fcn = _short(results, row["model"]), row["model"] == "query_fcn"
    if row["status"] == "> stop":
        widest = row["lower"]
        if not fcn and widest < factor * width:
            return (("unresolved", f"at T={T} the {name} fails up to width {widest} only, "
                     f"below {factor} x the best encoder's width {width}: a wider stop "
                     "(query_width_stop) would decide"), f"{name} > {widest}")
        return ("pass", ""), f"{name} > {widest}"
    if row["status"] == "found":
        star = row["star"]
        if star <= width:
            return (("fail" if exact else "unresolved",
                     f"at T={T} the {name} reaches the target at width {star}, not above the "
                     f"best encoder's width (at most {width}, unresolved): more steps would "
                     "decide"), f"{name} {star}")
        return ("pass", ""), (f"{name} {star} (reaches the target between the encoder's width "
                              f"and its stop: the ordering holds by a factor "
                              f"{star / width:.1f})")
    lower = row["lower"]
    if lower is not None and lower >= width:
        return ("pass", ""), f"{name} in {bracket_text(row)} ({row['status']})"
    return (("unresolved", f"at T={T} the {name} is {row['status']} ({row['reason']}), its "
             f"bracket {bracket_text(row)} reaching down to the best encoder's width {width}: "
             "more steps would decide"), f"{name} {row['status']}")


def _fixed_width_text(section):
    """Each recurrent net's held-out R^2 at its fixed width against T, beside q/T."""
    rows = section.get("query_fixed_width_summary") or []
    models = dict.fromkeys(r["model"] for r in rows)
    return "; ".join(
        f"{rows_m[0]['model_name'].split(' (')[0]} at width {rows_m[0]['width']}: " + ", ".join(
            f"{x['test_r2_mean']:.3f} at T={x['seq_len']} (q/T {x['ceiling']:.3f})"
            for x in rows_m)
        for rows_m in (select(rows, "seq_len", model=m) for m in models))


def _has_grid(config, family):
    """Whether the configuration gives ``family`` a rate grid (its own or a fallback)."""
    try:
        return bool(config.lr_grid(family))
    except KeyError:
        return False


#: what verdict 7 of the third set shows and what it does not (its note)
_THIRD_SET_SHOWS = (
    "Verdict 7 shows the ordering within this run's steps: each recurrent net and the FCN "
    "fail where the best positional encoder succeeds, up to several times its width, "
    "confirmed with twice the steps. It does not show the polynomial width the theory "
    "predicts for the recurrent nets: their own smallest widths are beyond a CPU run's steps "
    "(an LSTM at T = 8 needs about 16,000 steps at width 2 T d), so no slope of theirs is "
    "judged; their R^2 at one fixed width against T is reported beside q/T instead.")


def _query_separation_third(results, t, r):
    """Verdict 7 of the third set: (a) the best positional encoder's width, found or
    bounded at every T, grows with slope <= ``query_encoder_max_slope``; (b) every rival of
    the catalogue fails up to ``query_rival_stop_factor`` times that width (the FCN: its
    own stop), confirmed with twice the steps."""
    from .._models import MODELS, query_rivals

    config, s = config_of(results), results["architectures"]
    rows = [x for x in s["critical"] if x.get("layout") == "query"]
    lens = sorted({x["seq_len"] for x in rows})
    by = {}
    for x in rows:
        by.setdefault(x["model"], {})[x["seq_len"]] = x
    encoders = [m for m in by if m.startswith("query_encoder_") and m != "query_encoder_none"]
    absolute = [m for m in encoders if m != "query_encoder_rope"]
    rivals, factor, target = query_rivals(), t["query_rival_stop_factor"], s["target_r2"]
    families = sorted({"encoder", *(MODELS[m].family for m in rivals)})
    gates = [_target_gate(s, t["query_target_r2"], "searches'"),
             _lens_gate("the query layout's widths", lens, t["query_lens"], t["query_span"],
                        " (query_lens, e.g. 8, 16, 32, 64)"),
             ("query_encoder_rope" in encoders and bool(absolute)
              and all(set(by[m]) == set(lens) for m in encoders),
              "the verdict needs RoPE and at least one absolute encoding searched at every T "
              f"of the query layout; searched: {', '.join(encoders) or 'none'} "
              "(query_searched)")]
    gates += [(m in by and set(by[m]) == set(lens),
               f"the {_short(results, m)} is not searched at every T of the query layout")
              for m in rivals]
    gates += [_grid_gate(config, family, t) if _has_grid(config, family) else
              (False, f"no learning-rate grid for the {family} family (lr_grids)")
              for family in families]
    judged = partial(
        verdict, "query-layout separation",
        model="the query layout's architectures (beyond the paper)", gates=gates,
        note=_with_seeds(_THIRD_SET + ". " + _THIRD_SET_SHOWS, config),
        statement=(f"In the query layout, at every T of the run (at least {t['query_lens']} "
                   f"values spanning at least {t['query_span']}x): (a) the best encoder with "
                   "a positional encoding (RoPE and at least one absolute encoding searched) "
                   f"has its smallest width reaching mean validation R^2 {t['query_target_r2']} "
                   "found or bounded at every T, and the log-log slope of that width against "
                   f"T over at least {t['query_slope_lens']} T where it is found is <= "
                   f"{t['query_encoder_max_slope']}; (b) every recurrent or state-space net "
                   f"of the package ({', '.join(_short(results, m) for m in rivals[:-1])}) "
                   f"fails to reach it at every width up to at least {factor} x the encoder's "
                   "width at that T, and the FCN up to its own stop (4 T d), confirmed at the "
                   "stop with twice the steps; a rival reaching it at or below the encoder's "
                   "width fails the verdict, one reaching it between that width and its stop "
                   "is reported with its width."))
    if not all(ok for ok, _ in gates):
        return judged(evidence="not measured",
                      per_seed=[False for _ in config.architecture_seeds()])
    conditions, best, evidence = [], {}, []
    for T in lens:
        bounds = {m: _found_or_bounded(by[m][T], target) for m in encoders}
        bounds = {m: b for m, b in bounds.items() if b is not None}
        if not bounds:
            conditions.append(("unresolved", f"at T={T} no encoder with a positional "
                               "encoding has its width found or bounded: more steps "
                               "(query_n_train) or a wider query_width_stop would decide"))
            evidence.append(f"T={T}: no encoder width found or bounded")
            continue
        winner = min(bounds, key=lambda m: (bounds[m][0], not bounds[m][1]))
        width, exact = bounds[winner]
        best[T] = (winner, width, exact)
        texts = []
        for m in rivals:
            condition, text = _rival_condition(results, by[m][T], width, exact, factor, T)
            conditions.append(condition)
            texts.append(text)
        evidence.append(f"T={T}: best positional encoder {_short(results, winner)} "
                        + (str(width) if exact else
                           f"<= {width} (unresolved: {by[winner][T]['reason']})")
                        + "; " + ", ".join(texts))
    widths = {T: width for T, (_, width, exact) in best.items() if exact}
    slope = None
    if len(widths) < t["query_slope_lens"]:
        conditions.append(("unresolved", f"the best positional encoder's width is found at "
                           f"{len(widths)} T ({', '.join(map(str, widths)) or 'none'}); a "
                           f"slope needs {t['query_slope_lens']}: more steps (query_n_train) "
                           "would decide"))
    else:
        slope = loglog_slope(list(widths), list(widths.values()))
        conditions.append(("pass" if slope <= t["query_encoder_max_slope"] else "fail", ""))
    evidence.append(f"log-log slope of the best positional encoder's width over the T where "
                    f"found: {fmt(slope, '.2f')}")
    fixed = _fixed_width_text(s)
    if fixed:
        evidence.append("reported, not judged, held-out R^2 at one fixed width: " + fixed)
    from .._architectures import more_steps_text

    more = more_steps_text(s)
    if more:
        evidence.append("reported, not judged, " + more)
    checks = _query_checks(config, s, t)
    return judged(evidence="; ".join(evidence), conditions=conditions, checks=checks,
                  per_seed=_query_per_seed(config, s, by, encoders, lens, rivals))
