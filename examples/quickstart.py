"""
Quickstart: a transformer selects the tokens, a fully-connected net does not
============================================================================

A one-layer transformer learns to average the q selected tokens out of T and
keeps doing so on sequences longer than any it was trained on; a
fully-connected net of the same width does not learn the task (Wang, Wei, Hsu
& Lee, ICML 2024). Both are scikit-learn estimators: ``fit``, ``score`` and
``predict`` work as for any regressor. The transformer runs at its defaults,
which average the attention over ``n_pe_draws=8`` positional draws (the
package's extension; ``n_pe_draws=1`` is the paper's model).

Run it as a script, with the number of training sequences as its argument::

    python examples/quickstart.py          # 20000 sequences: 17 s on 2 idle CPU cores
    python examples/quickstart.py 2000     # fewer training sequences: seconds
"""

# %%
# The task
# --------
# ``make_sparse_selection`` draws sequences of T Gaussian tokens in R^d and a
# random subset of q positions per sequence. ``X`` holds the tokens and, in
# its last channel, a 0/1 indicator of the selected positions; ``y`` is the
# average of the selected tokens.
import sys
import time

import matplotlib.pyplot as plt
import numpy as np

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

start = time.perf_counter()
n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
T, d, q = 20, 8, 3  # sequence length, token dimension, number of selected tokens

X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)
X_test, y_test = make_sparse_selection(2000, T, d, q, random_state=1)
print(f"X: {X.shape} (n_samples, T, d + 1), y: {y.shape} (n_samples, d)")

# %%
# Two estimators of the same width
# --------------------------------
# The transformer's width is d + ``pe_dim`` = 8 + 64 = 72 at its defaults.
# The fully-connected net gets the same width; the theory says it needs a
# width of order T d = 160, and then many more sequences than here.
transformer = SparseTokenTransformer(random_state=0).fit(X, y)
fcn = SparseTokenFCN(hidden_width=72, random_state=0).fit(X, y)
print(f"held-out R^2 at T={T}, {n_samples} training sequences: "
      f"transformer {transformer.score(X_test, y_test):.3f}, "
      f"FCN {fcn.score(X_test, y_test):.3f}")

# %%
# Longer sequences
# ----------------
# The stochastic positional encoding draws fresh position vectors for every
# sequence, so the fitted transformer takes any length. The FCN has one input
# unit per position and accepts only the length it was fitted on.
for factor in (2, 4):
    X_long, y_long = make_sparse_selection(2000, factor * T, d, q, random_state=factor)
    print(f"transformer at {factor}T = {factor * T}: R^2 {transformer.score(X_long, y_long):.3f}")

# %%
# Where the transformer attends
# -----------------------------
# ``predict_attention`` gives the attention weights of each sequence (they
# sum to 1). A model that solved the task puts 1/q on each selected token.
attention = transformer.predict_attention(X_test[:1])[0]  # (T,)
selected = X_test[0, :, -1] == 1
print(f"attention mass on the {q} selected tokens: {attention[selected].sum():.3f}")

fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(np.arange(T), attention, color=np.where(selected, "tab:blue", "lightgray"))
ax.axhline(1 / q, color="black", linestyle=":", label="1/q")
ax.set(xlabel="position", ylabel="attention weight",
       title=f"One held-out sequence: the {q} selected positions in blue")
ax.set_xticks(np.arange(T))
ax.legend()
fig.tight_layout()
print(f"took {time.perf_counter() - start:.1f} s")
plt.show()
