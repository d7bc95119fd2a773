"""The experiments of a run, in the order of the report.

To add one: a module ``_<name>.py`` with an :class:`~._experiment.Experiment`
subclass and its instance ``EXPERIMENT`` (importing shared modules only,
never another experiment; new models go into ``_models.MODELS``, new numbers
into ``ReproductionConfig`` with a default), added to ``EXPERIMENTS`` below;
a verdict it supports goes into ``_verdicts``, with tests on constructed
results that pass, fail and are inconclusive (tests/test_verdicts.py).
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
