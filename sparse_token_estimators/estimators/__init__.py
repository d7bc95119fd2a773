"""scikit-learn estimators for sparse token selection, built on skorch.

Each estimator is a ``NeuralNetRegressor`` subclass (``_base``) that declares only
its module, its parameters and their rules, the sizes it builds the module with and
the lengths it accepts: every skorch feature (callbacks, ``history_``,
``warm_start``, ``partial_fit``, checkpoints, ...) works, and the widths are
top-level parameters that ``GridSearchCV`` searches by name.

- ``transformer``: :class:`SparseTokenTransformer`, the paper's model;
- ``fcn``: :class:`SparseTokenFCN`, the fully-connected net of its lower bound;
- ``encoder``, ``rnn``, ``ssm``: :class:`SparseTokenEncoder`, :class:`SparseTokenRNN`,
  :class:`SparseTokenSSM` (Mamba), beyond the paper.

The checks are in ``_checks`` (parameter rules in ``_rules``), what a fitted module
was built with in ``_state``, saving and loading in ``_persistence``.
"""

from ..callbacks import TrainingDivergedError
from .encoder import SparseTokenEncoder
from .fcn import SparseTokenFCN
from .rnn import SparseTokenRNN
from .ssm import SparseTokenSSM
from .transformer import SparseTokenTransformer

__all__ = ["SparseTokenEncoder", "SparseTokenFCN", "SparseTokenRNN", "SparseTokenSSM",
           "SparseTokenTransformer", "TrainingDivergedError"]
