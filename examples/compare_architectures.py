"""
Grid search over architectures: the smallest width that solves the task
=======================================================================

One scikit-learn ``Pipeline`` whose model step the grid swaps between four
architectures, each with its own width grid: the paper's one-layer
transformer (:class:`~sparse_token_estimators.SparseTokenTransformer` with the
package's 8 positional draws, width d + ``pe_dim``), the fully-connected net
(:class:`~sparse_token_estimators.SparseTokenFCN`, width ``hidden_width``), a
standard transformer encoder
(:class:`~sparse_token_estimators.SparseTokenEncoder`, width ``d_model``,
no positional encoding) and a GRU
(:class:`~sparse_token_estimators.SparseTokenRNN`, width ``hidden_size``).
One ``GridSearchCV`` scores every (architecture, width) pair; the table
gives, per architecture, the smallest width whose cross-validated R^2
reaches 0.9. The FCN needs width of order T d (Wang, Wei, Hsu & Lee, ICML
2024) and many more sequences than this to get there.

Run it as a script, with the number of training sequences as its argument::

    python examples/compare_architectures.py        # 3000 sequences: 25 s on 2 idle CPU cores
    python examples/compare_architectures.py 10000  # more sequences
"""

# %%
# One pipeline, four architectures
# --------------------------------
# The grid is a list of dicts, one per architecture: ``model`` names the
# estimator, ``model__<width>`` its widths. Further steps (a scaler, say)
# would go before ``model`` and be shared by all four.
import sys
import time

import matplotlib.pyplot as plt
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    make_sparse_selection,
)

start = time.perf_counter()
n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
T, d, q = 10, 8, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)

#: architecture -> (estimator, its width parameter, the width grid)
ARCHITECTURES = {
    # the package's default, 8 positional draws, with epochs enough for a few
    # thousand sequences (the paper's one-draw model needs more of them)
    "transformer (8 draws)": (SparseTokenTransformer(max_epochs=40, random_state=0),
                              "pe_dim", [4, 8, 16, 32]),
    "FCN": (SparseTokenFCN(random_state=0), "hidden_width", [16, 64, 256]),
    "encoder (no PE)": (SparseTokenEncoder(random_state=0), "d_model", [4, 8, 16]),
    "GRU": (SparseTokenRNN(random_state=0), "hidden_size", [8, 16, 32]),
}
pipeline = Pipeline([("model", SparseTokenTransformer())])
grid = [{"model": [est], f"model__{param}": widths}
        for est, param, widths in ARCHITECTURES.values()]
search = GridSearchCV(pipeline, grid, cv=3, refit=False, n_jobs=-1)

# %%
# The search
# ----------
# 13 candidates, 3 folds each, fitted in parallel worker processes.
search.fit(X, y)


def width(name, params):
    """The architecture's width: d + pe_dim for the paper's transformer."""
    _, param, _ = ARCHITECTURES[name]
    value = params[f"model__{param}"]
    return d + value if param == "pe_dim" else value


names = {type(est): name for name, (est, _, _) in ARCHITECTURES.items()}
curves = {name: [] for name in ARCHITECTURES}
for params, r2 in zip(search.cv_results_["params"], search.cv_results_["mean_test_score"]):
    name = names[type(params["model"])]
    curves[name].append((width(name, params), r2))

# %%
# The smallest width reaching R^2 0.9
# -----------------------------------
print(f"{n_samples} sequences, T = {T}, d = {d}, q = {q} (T d = {T * d}); "
      "3-fold cross-validated R^2, one seed")
print(f"{'architecture':22s} {'widths tried':>20s} {'R^2 at each':>26s} {'smallest >= 0.9':>16s}")
for name, points in curves.items():
    reached = [w for w, r2 in points if r2 >= 0.9]
    smallest = str(min(reached)) if reached else "not reached"
    tried = ", ".join(str(w) for w, _ in points)
    scores = ", ".join(f"{r2:.2f}" for _, r2 in points)
    print(f"{name:22s} {tried:>20s} {scores:>26s} {smallest:>16s}")

# %%
# R^2 against width
# -----------------
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, points in curves.items():
    ax.plot(*zip(*points), marker="o", label=name)
ax.axhline(0.9, color="gray", linestyle=":", linewidth=1)
ax.axvline(T * d, color="black", linestyle="--", linewidth=1, label="T d")
ax.set(xscale="log", xlabel="width", ylabel="cross-validated R^2", ylim=(-0.1, 1.02),
       title=f"T={T}, d={d}, q={q}, {n_samples} sequences")
ax.legend(fontsize=8)
fig.tight_layout()
print(f"took {time.perf_counter() - start:.1f} s")
plt.show()
