"""Sparse token selection as scikit-learn estimators.

Transformers provably learn to average q chosen tokens out of T with width
about d + q log T, while fully-connected nets need width about T d (Wang, Wei,
Hsu & Lee, ICML 2024, arXiv:2406.06893; the task is the q-sparse averaging of
Sanford, Hsu & Telgarsky, NeurIPS 2023, arXiv:2306.02896).
"""

from ._more_estimators import SparseTokenEncoder, SparseTokenRNN
from .datasets import SparseSelectionStream, make_sparse_selection
from .estimators import SparseTokenFCN, SparseTokenTransformer, TrainingDivergedError
from .preprocessing import FlattenTokens

__all__ = [
    "FlattenTokens",
    "SparseSelectionStream",
    "SparseTokenEncoder",
    "SparseTokenFCN",
    "SparseTokenRNN",
    "SparseTokenTransformer",
    "TrainingDivergedError",
    "make_sparse_selection",
]
__version__ = "0.1.0"
