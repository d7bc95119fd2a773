"""Quickstart: a transformer learns to average the selected tokens, and keeps
doing so on longer sequences; a fully-connected net of the same width does not.

    python examples/quickstart.py          # half a minute on 2 CPU cores
    python examples/quickstart.py 2000     # fewer training sequences: seconds
"""

import sys

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
T, d, q = 20, 8, 3  # sequence length, token dimension, number of selected tokens

# X: (n, T, d + 1), tokens plus a 0/1 "selected" channel; y: (n, d), the average
# of the q selected tokens.
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)
X_test, y_test = make_sparse_selection(2000, T, d, q, random_state=1)

transformer = SparseTokenTransformer(random_state=0).fit(X, y)  # width d + pe_dim = 72
fcn = SparseTokenFCN(hidden_width=72, random_state=0).fit(X, y)  # same width, T*d = 160
print(f"held-out R^2 at T={T}: transformer {transformer.score(X_test, y_test):.3f}, "
      f"FCN {fcn.score(X_test, y_test):.3f}")

# The stochastic positional encoding takes any length; the FCN only the one it saw.
for factor in (2, 4):
    X_long, y_long = make_sparse_selection(2000, factor * T, d, q, random_state=factor)
    print(f"transformer at {factor}T = {factor * T}: R^2 {transformer.score(X_long, y_long):.3f}")

attention = transformer.predict_attention(X_test[:1])[0]  # (T,), sums to 1
selected = X_test[0, :, -1] == 1
print(f"attention mass on the {q} selected tokens: {attention[selected].sum():.3f}")
