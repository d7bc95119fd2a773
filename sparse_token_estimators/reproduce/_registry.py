"""The experiments of a run, in the order of the report.

To add an experiment: write a module with an :class:`~._experiment.Experiment`
subclass and its ``EXPERIMENT`` instance, and add it here.
"""

from . import _alignment, _length_generalisation, _width_scaling, _width_separation

EXPERIMENTS = (
    _width_separation.EXPERIMENT,
    _length_generalisation.EXPERIMENT,
    _alignment.EXPERIMENT,
    _width_scaling.EXPERIMENT,
)
