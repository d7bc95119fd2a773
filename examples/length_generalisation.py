"""Length generalisation: stochastic versus fixed positional encoding.

Both transformers are trained at length T and scored at T, 2T, 4T, 8T. The
fixed encoding's positions beyond T were never trained, so it fails there; the
stochastic one draws fresh positions for every sequence and keeps working.
A callback records how W aligns with the identity during training.

    python examples/length_generalisation.py          # half a minute on 2 CPU cores
    python examples/length_generalisation.py 2000     # fewer training sequences
"""

import sys

from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.callbacks import AlignmentRecorder

n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
T, d, q = 10, 8, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)

print("encoding     " + "".join(f"{f}T R^2  " for f in (1, 2, 4, 8)) + "alignment")
for encoding in ("stochastic", "fixed"):
    est = SparseTokenTransformer(pe_dim=128, positional_encoding=encoding, random_state=0,
                                 callbacks=[AlignmentRecorder()]).fit(X, y)
    scores = []
    for factor in (1, 2, 4, 8):
        X_test, y_test = make_sparse_selection(2000, factor * T, d, q, random_state=factor)
        scores.append(est.score(X_test, y_test))
    alignment = est.history_[:, "alignment"]  # one value per epoch
    print(f"{encoding:12s} " + "".join(f"{s:7.3f}  " for s in scores)
          + f"{alignment[0]:.2f} -> {alignment[-1]:.2f}")
