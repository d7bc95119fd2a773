"""
scikit-learn baselines beside the paper's two estimators
========================================================

``FlattenTokens`` turns the (n, T, d + 1) sequences into (n, T (d + 1)) rows,
so any scikit-learn regressor can try the task in a pipeline. One
``cross_validate`` loop scores ridge regression, a multi-layer perceptron and
nearest neighbours beside the package's fully-connected net and transformer.
The transformer, which attends to the selected positions, comes close to
R^2 = 1 from a few thousand sequences; the models that see the flattened
sequence stay well below it (a linear map cannot pick tokens by their
indicator; the nets need many more sequences).

Run it as a script, with the number of training sequences as its argument::

    python examples/pipeline_comparison.py          # 10000 sequences: 19 s on 2 idle CPU cores
    python examples/pipeline_comparison.py 1000     # fewer training sequences
"""

# %%
# The models
# ----------
import sys
import time
import warnings

import matplotlib.pyplot as plt
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge
from sklearn.model_selection import cross_validate
from sklearn.neighbors import KNeighborsRegressor
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline

from sparse_token_estimators import (
    FlattenTokens,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)

start = time.perf_counter()
n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
T, d, q = 10, 8, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)

# The perceptron gets a budget of 50 epochs, like the package's nets (30 and
# 15); with more sequences it is still improving when the budget ends, which
# scikit-learn reports with a ConvergenceWarning per fit.
warnings.filterwarnings("ignore", category=ConvergenceWarning)
models = {
    "FlattenTokens + Ridge": make_pipeline(FlattenTokens(), Ridge()),
    "FlattenTokens + MLPRegressor": make_pipeline(
        FlattenTokens(), MLPRegressor(hidden_layer_sizes=(256,), max_iter=50,
                                      early_stopping=True, random_state=0)),
    "FlattenTokens + KNeighbors": make_pipeline(FlattenTokens(), KNeighborsRegressor()),
    "SparseTokenFCN (width 256)": SparseTokenFCN(random_state=0),
    "SparseTokenTransformer": SparseTokenTransformer(random_state=0),
}

# %%
# One cross-validation loop
# -------------------------
# Three folds, R^2 averaged over the d outputs, fits in parallel processes.
r2 = {}
print(f"{n_samples} sequences, T = {T}, d = {d}, q = {q}; 3-fold cross-validation")
print(f"{'model':30s} {'R^2':>6s} {'fit s':>6s}")
for name, model in models.items():
    cv = cross_validate(model, X, y, cv=3, scoring="r2", n_jobs=-1)
    r2[name] = cv["test_score"].mean()
    print(f"{name:30s} {r2[name]:6.3f} {cv['fit_time'].mean():6.1f}")

# %%
# The figure
# ----------
fig, ax = plt.subplots(figsize=(7, 3))
ax.barh(list(r2), list(r2.values()),
        color=["tab:gray"] * 3 + ["tab:red", "tab:blue"])
ax.axvline(0, color="black", linewidth=0.8)
ax.invert_yaxis()
ax.set(xlabel="cross-validated R^2", title=f"T={T}, d={d}, q={q}, {n_samples} sequences")
fig.tight_layout()
print(f"took {time.perf_counter() - start:.1f} s")
plt.show()
