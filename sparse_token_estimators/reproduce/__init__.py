"""Reproduce the claims of Wang, Wei, Hsu & Lee (ICML 2024) with the package's estimators.

Nine experiments, each in its own module, over several seeds, and six
verdicts whose thresholds were fixed before the run (``_verdicts``). Four
judge the paper's claims on the paper's model (one stochastic positional
draw, ``n_pe_draws=1``), with the package's ensemble of draws shown beside
it as an extension: width separation (against the width-aware FCN bound),
length generalisation (per length up to 8T, and against pe_dim), alignment
of W with the identity (from W = 0, against sequences seen) and the
transformer's width scaling (pe_dim* over T = 8..128 by a bracketing
search, ``_bracket``). The FCN's tightness on the population (m* against
T d) is judged too. Four go beyond the paper: training on the population
against a fixed sample (approximation against estimation error; its
separation judged, the rest measured), sample complexity (learning curves
at a fixed budget of steps; measured), the five positional encodings under
one protocol (measured) and other architectures (a transformer encoder and
recurrent nets: smallest widths and per-length R^2; measured). The task is
the q-sparse averaging of Sanford, Hsu & Telgarsky (NeurIPS 2023).

Public:

- :func:`run` runs a configuration and returns the results dict;
  :func:`write_outputs` writes results.json, CSV tables, figures and
  summary.md; :func:`assess_claims` judges a results dict (``THRESHOLDS``,
  fixed before the run): supported, not supported or inconclusive.
- :class:`ReproductionConfig` and the presets ``FIRST``, ``QUICK``, ``PAPER``, ``SMOKE``
  (``SCALES`` by name), :func:`with_sizes`, :class:`Training`.
- :class:`Progress`: the display that advances as each fit finishes, in any
  joblib backend.

The layout: ``_config`` (sizes), ``_data`` (seeded sets), ``_models`` (the
models and :class:`~._models.Fit`), ``_fits`` (the one runner: every fit
of a run, in one ``joblib.Parallel``), ``_experiment`` (what every
experiment is, and what they share), one module per experiment (registered
in ``_registry``), ``_bracket`` (the search for a critical width),
``_verdicts`` (the six verdicts and their thresholds), ``_report``
(tables, results file, figures, summary), ``_figures`` (shared plotting),
``_progress``, ``_records`` (the store of finished fits), ``_run``.
"""

import importlib

from ._config import (
    FIRST,
    PAPER,
    QUICK,
    SCALES,
    SMOKE,
    ReproductionConfig,
    Training,
    with_sizes,
)

# The rest on first use (PEP 562): the command line reads the presets above
# and checks its arguments before it imports torch.
_LAZY = {
    "save_figures": "._report", "Progress": "._progress", "THRESHOLDS": "._report",
    "assess_claims": "._report", "summary_markdown": "._report",
    "write_outputs": "._report", "run": "._run",
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])

__all__ = [
    "FIRST", "PAPER", "QUICK", "SCALES", "SMOKE", "THRESHOLDS", "Progress", "ReproductionConfig",
    "Training", "assess_claims", "run", "save_figures",
    "summary_markdown", "with_sizes", "write_outputs",
]
