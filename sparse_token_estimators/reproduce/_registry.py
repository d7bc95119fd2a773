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


def selected(config):
    """The experiments ``config`` runs (``config.experiments``; None: all), in order."""
    if config.experiments is None:
        return EXPERIMENTS
    known = [e.name for e in EXPERIMENTS]
    unknown = sorted(set(config.experiments) - set(known))
    if unknown:
        raise ValueError(f"experiments={tuple(config.experiments)!r} names {unknown}, which "
                         f"the reproduction does not have; choose among {known}.")
    return tuple(e for e in EXPERIMENTS if e.name in config.experiments)


def planned_fits(config, experiments=None):
    """``{fit: [experiments that use it]}``: what ``run`` fits beside the searches
    (``experiments``: default ``selected(config)``)."""
    used_by = {}
    for experiment in selected(config) if experiments is None else experiments:
        for fit in experiment.fits(config):
            names = used_by.setdefault(fit, [])
            if experiment.name not in names:
                names.append(experiment.name)
    return used_by
