"""scikit-learn baselines beside the two estimators, in one cross_validate table.

FlattenTokens turns (n, T, d + 1) sequences into (n, T * (d + 1)) rows, so any
scikit-learn regressor can try the task.

    python examples/pipeline_comparison.py          # under a minute on 2 CPU cores
    python examples/pipeline_comparison.py 1000     # fewer training sequences
"""

import sys

from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_validate
from sklearn.neighbors import KNeighborsRegressor
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline

from sparse_token_estimators import (FlattenTokens, SparseTokenFCN, SparseTokenTransformer,
                                     make_sparse_selection)

n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
T, d, q = 10, 8, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)

models = {
    "FlattenTokens + Ridge": make_pipeline(FlattenTokens(), Ridge()),
    "FlattenTokens + MLPRegressor": make_pipeline(
        FlattenTokens(), MLPRegressor(hidden_layer_sizes=(256,), max_iter=50,
                                      early_stopping=True, random_state=0)),
    "FlattenTokens + KNeighbors": make_pipeline(FlattenTokens(), KNeighborsRegressor()),
    "SparseTokenFCN (width 256)": SparseTokenFCN(random_state=0),
    "SparseTokenTransformer": SparseTokenTransformer(random_state=0),
}
print(f"{'model':30s} {'R^2':>6s} {'fit s':>6s}")
for name, model in models.items():
    cv = cross_validate(model, X, y, cv=3, scoring="r2", n_jobs=-1)
    print(f"{name:30s} {cv['test_score'].mean():6.3f} {cv['fit_time'].mean():6.1f}")
