"""
Selection by position: the five estimators in the query layout
==============================================================

In the default layout the selection indicator sits on the token rows, so a
model can select by content alone: a transformer encoder without positional
encoding solves it. In the *query layout* (``layout="query"``) the subset is
given as q rows ``[0_d, i_j]`` after the T tokens, the 1-based positions of
the selected tokens: a model must match positions, which is what the theory
is about (Sanford, Hsu & Telgarsky, NeurIPS 2023; Wang, Wei, Hsu & Lee, ICML
2024). Predicting the mean of all T tokens scores R^2 = q/T, and a model
symmetric in the token rows (the encoder without positional encoding)
cannot do better.

One ``GridSearchCV`` swaps the model step of one ``Pipeline`` between the
five estimators (the paper's transformer, the FCN, the encoder with and
without a positional encoding, a GRU, and Mamba, a selective state-space
model: ``SparseTokenSSM``, the ``[ssm]`` extra), each in the query layout, scores them
on one data set, then the fitted models that take other lengths are scored
at 2T and 4T.

Run it as a script, with the number of training sequences as its argument::

    python examples/query_layout.py        # 3000 sequences: 65 s of CPU time, 38 s on 2 idle cores
"""

# %%
# One data set in the query layout
# --------------------------------
import sys
import time

from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline

from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    make_sparse_selection,
)

start = time.perf_counter()
n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
T, d, q = 8, 4, 2
X, y = make_sparse_selection(n_samples, T, d, q, layout="query", random_state=0)
print(f"X {X.shape}: {T} token rows, then {q} query rows; the query rows of the "
      f"first sequence name positions {X[0, T:, -1].astype(int).tolist()}")

# %%
# One search over the architectures
# ---------------------------------
# Each estimator is told the layout; ``n_selected`` (where the tokens end) is
# learned from the data at fit, as ``token_dim`` is.
query = {"layout": "query", "random_state": 0}
MODELS = {
    "transformer (paper's model)": SparseTokenTransformer(pe_dim=32, n_pe_draws=1,
                                                          max_epochs=40, **query),
    "FCN": SparseTokenFCN(hidden_width=128, **query),
    "encoder, no PE": SparseTokenEncoder(d_model=16, positional_encoding="none", **query),
    "encoder, RoPE": SparseTokenEncoder(d_model=16, positional_encoding="rope", **query),
    "GRU": SparseTokenRNN(hidden_size=32, **query),
    "Mamba (selective SSM)": SparseTokenSSM(d_model=16, **query),
}
search = GridSearchCV(Pipeline([("model", MODELS["FCN"])]),
                      {"model": list(MODELS.values())}, cv=3, n_jobs=-1, refit=False)
search = search.fit(X, y)

# %%
# Their scores
# ------------
results = search.cv_results_
names = list(MODELS)
print(f"\nQuery layout, T={T}, d={d}, q={q}, {n_samples} sequences; "
      f"one seed (random_state=0); mean cross-validated R^2 over 3 folds (the mean of "
      f"all tokens: R^2 {q / T:.3f})")
print(f"{'model':<30} {'R^2':>7} {'sd':>7}")
for i, name in enumerate(names):
    print(f"{name:<30} {results['mean_test_score'][i]:7.3f} {results['std_test_score'][i]:7.3f}")

# %%
# Longer sequences
# ----------------
# The paper's transformer, the encoder, the GRU and Mamba take any length: fitted
# at T, scored on fresh data at 2T and 4T, whose query rows name positions
# up to the longer T. The FCN accepts only the T it was fitted on.
print("\nHeld-out R^2 per length (fitted once on all the data at T, one seed)")
print(f"{'model':<30} " + " ".join(f"{f'{f}T':>7}" for f in (1, 2, 4)))
for name, est in MODELS.items():
    if name == "FCN":
        continue
    fitted = est.fit(X, y)
    scores = []
    for factor in (1, 2, 4):
        X_L, y_L = make_sparse_selection(1000, factor * T, d, q, layout="query",
                                         random_state=factor)
        scores.append(r2_score(y_L, fitted.predict(X_L)))
    print(f"{name:<30} " + " ".join(f"{s:7.3f}" for s in scores))

print(f"\ntook {time.perf_counter() - start:.0f} s")
