"""Sparse token selection as scikit-learn estimators.

Transformers provably learn to average q chosen tokens out of T with width
about d + q log T, while fully-connected nets need width about T d (Wang, Wei,
Hsu & Lee, ICML 2024, arXiv:2406.06893; the task is the q-sparse averaging of
Sanford, Hsu & Telgarsky, NeurIPS 2023, arXiv:2306.02896).
"""

import importlib

#: the public names, by the module that defines them: imported on first use
#: (PEP 562), so that ``python -m sparse_token_estimators`` checks its
#: arguments before it pays for importing torch, scikit-learn and skorch
_PUBLIC = {
    "FlattenTokens": ".preprocessing",
    "SparseSelectionStream": ".datasets",
    "SparseTokenEncoder": ".estimators",
    "SparseTokenFCN": ".estimators",
    "SparseTokenRNN": ".estimators",
    "SparseTokenSSM": ".estimators",
    "SparseTokenTransformer": ".estimators",
    "TrainingDivergedError": ".estimators",
    "compare_critical_widths": ".model_selection",
    "critical_width": ".model_selection",
    "make_sparse_selection": ".datasets",
    "split_query": "._layout",
    "to_indicator_layout": "._layout",
    "to_query_layout": "._layout",
}

__all__ = [
    "FlattenTokens",
    "SparseSelectionStream",
    "SparseTokenEncoder",
    "SparseTokenFCN",
    "SparseTokenRNN",
    "SparseTokenSSM",
    "SparseTokenTransformer",
    "TrainingDivergedError",
    "compare_critical_widths",
    "critical_width",
    "make_sparse_selection",
    "split_query",
    "to_indicator_layout",
    "to_query_layout",
]
__version__ = "0.1.0"


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
        globals()[name] = value  # once imported, a plain attribute
        return value
    try:  # a submodule, as an eager package would have it: sparse_token_estimators.theory
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
