"""Reproduce the claims of Wang, Wei, Hsu & Lee (ICML 2024) with the package's estimators.

Nine experiments over several seeds, and seven verdicts whose thresholds were
fixed before the run: width separation, length generalisation, alignment and
the transformer's width scaling on the paper's model (one positional draw;
the package's ensemble of draws beside it), the FCN's tightness on the
population, the separation when trained on the population, and (beyond the
paper) the architectures' separation in the query layout, where the subset is
given by position. Beyond the paper, measured: approximation against
estimation error, sample complexity, the positional encodings and other
architectures in both layouts. The task is the q-sparse
averaging of Sanford, Hsu & Telgarsky (NeurIPS 2023).

Public: :func:`run` (a configuration to a results dict), :func:`write_outputs`
(results.json, CSV tables, figures, summary.md), :func:`assess_claims`,
:class:`ReproductionConfig`, the presets ``FIRST``, ``QUICK``, ``PAPER``,
``SMOKE`` (``SCALES`` by name), :func:`with_sizes`, :class:`Training` and
:class:`Progress`.

The layout: ``_config``, ``_data`` (seeded sets), ``_models`` (the catalogue
and :class:`~._models.Fit`), ``_fits`` (the one runner), ``_experiment``
(what experiments share), one module per experiment (``_registry``),
``_bracket`` (critical-width searches), ``_verdicts``, ``_report``,
``_figures``, ``_progress``, ``_records`` (the store), ``_run``.
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
