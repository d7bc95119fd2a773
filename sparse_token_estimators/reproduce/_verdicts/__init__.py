"""The seven verdicts, with thresholds fixed before the run (2026-12-01; sets two to four).

Each verdict reads its experiment's section of the results and says
"supported", "not supported", or "inconclusive" when the run cannot resolve
its threshold, with the reason and the sizes that would decide it. The
thresholds (``THRESHOLDS``) are the same for every run, recorded in every
results file; the documentation's reproduction page (section "Verdicts,
fixed before the run") gives each verdict's rule.

Four sets of verdicts were fixed, each before any run of its protocol
(docs/reproduction.rst; ``SETS``). Verdicts 4, 5 and 7 of a run are judged by
the set of its critical-width searches, which their section records
(``protocol``): a constant rate, the second set; the rate decayed by a cosine
over each fit's steps, the third; the third's recipe with the fourth set's
two rules (a non-monotone search searched again with twice the steps; an
unsettled width counting where its bound is met), the fourth, which judges
verdicts 4 and 5. Verdict 7 of the third set (:func:`._query._query_separation_third`)
replaces the recurrent nets' slopes, beyond a CPU run's steps, by the
ordering within the run's steps. Each claim names its set (``"set"``).

One module per group: ``_rules`` (thresholds, sets, outcomes, gates),
``_paper`` (verdicts 1, 2, 3 and 6), ``_widths`` (4 and 5), ``_query`` (7).
"""

from ._paper import _alignment, _length, _separation
from ._query import _query_separation, _query_separation_third
from ._rules import (
    FIXED_ON,
    FOURTH_SET_FIXED_ON,
    RESOLUTION,
    SECOND_SET_FIXED_ON,
    SETS,
    THIRD_SET_FIXED_ON,
    THRESHOLDS,
    _training_gate,
    compare,
    is_paper_scale,
    r2_se,
    verdict,
)
from ._widths import BOUND_MET, _scaling, _tightness

__all__ = ["BOUND_MET", "FIXED_ON", "FOURTH_SET_FIXED_ON", "RESOLUTION", "SECOND_SET_FIXED_ON",
           "SETS", "THIRD_SET_FIXED_ON", "THRESHOLDS", "VERDICTS", "_alignment",
           "_training_gate", "assess_claims", "compare", "is_paper_scale", "r2_se", "verdict"]

#: the verdicts in the reproduction page's order, with the section each needs
VERDICTS = (("width_separation", lambda res, t, r: _separation(res, t, r, population=False)),
            ("length_generalisation", _length), ("alignment", _alignment),
            ("width_scaling", _scaling), ("fcn_tightness", _tightness),
            ("population", lambda res, t, r: _separation(res, t, r, population=True)),
            ("architectures", lambda res, t, r: (
                _query_separation_third
                if res["architectures"].get("protocol") in ("third set", "fourth set")
                else _query_separation)(res, t, r)))

#: the verdicts whose set is their searches' recipe (the others keep the first set's rules)
_JUDGED_BY_PROTOCOL = ("width_scaling", "fcn_tightness", "architectures")


def assess_claims(results, thresholds=THRESHOLDS, resolution=RESOLUTION):
    """Judge each verdict whose experiment ran: supported, not supported or inconclusive.

    Returns a list of dicts: ``claim``, ``model``, ``statement``, ``verdict``
    ("supported", "not supported" or "inconclusive", on the mean over seeds), ``supported``,
    ``inconclusive_reasons`` (and what would decide), ``seeds_supporting``,
    ``n_seeds``, ``evidence``, ``note``, ``sanity_checks`` and ``set`` (the set of
    verdicts whose rules judged it: "first", "second", "third" or "fourth"). Other
    ``thresholds`` judge the same numbers by other standards.
    """
    claims = [judge(results, thresholds, resolution) for key, judge in VERDICTS
              if key in results]
    for claim, key in zip(claims, [key for key, _ in VERDICTS if key in results]):
        claim["set"] = (results[key].get("protocol", "second set").split()[0]
                        if key in _JUDGED_BY_PROTOCOL else "first")
    return claims
