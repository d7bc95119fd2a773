"""The experiments of a run, in the order of the report.

To add an experiment:

1. Write ``_<name>.py`` with a subclass of :class:`~._experiment.Experiment`
   and its instance ``EXPERIMENT``: ``name`` (its key in the results and the
   stem of its files), ``title``, ``fits(config)`` (the
   :class:`~._models.Fit` s it needs; fits other experiments ask for too are
   made once and shared) or ``search(config)`` (a generator of fits chosen
   round by round from the records of earlier ones, e.g. by the bracketing
   search of ``_bracket``), ``collect(config, records, found)`` (its
   section of the results: per-seed rows and ``summarise`` d rows),
   ``tables``, ``summary`` and ``figures``. It imports shared modules
   only, never another experiment. A model the run does not know yet goes
   into ``_models.MODELS``.
2. Add ``EXPERIMENT`` to ``EXPERIMENTS`` below. Numbers it needs from the
   configuration go into ``ReproductionConfig`` with a default.
3. A verdict it supports goes into ``_verdicts`` with its thresholds, fixed
   before the run, and tests on constructed results
   (tests/test_verdicts.py): one that passes, one that fails, one that is
   inconclusive.
"""

from . import (
    _alignment,
    _architectures,
    _encodings,
    _fcn_tightness,
    _length_generalisation,
    _population,
    _sample_complexity,
    _width_scaling,
    _width_separation,
)

EXPERIMENTS = (
    _width_separation.EXPERIMENT,
    _length_generalisation.EXPERIMENT,
    _alignment.EXPERIMENT,
    _width_scaling.EXPERIMENT,
    _fcn_tightness.EXPERIMENT,
    _population.EXPERIMENT,
    _sample_complexity.EXPERIMENT,
    _encodings.EXPERIMENT,
    _architectures.EXPERIMENT,
)
