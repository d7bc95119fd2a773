"""Grid search over the widths of both architectures with scikit-learn.

The transformer's width is d + pe_dim, the FCN's is hidden_width; both are
ordinary parameters, so GridSearchCV searches them by name. Below T*d the FCN
cannot fit the task (Wang, Wei, Hsu & Lee, ICML 2024).

    python examples/grid_search_widths.py          # under a minute on 2 CPU cores
    python examples/grid_search_widths.py 1000     # fewer training sequences
"""

import sys

from sklearn.model_selection import GridSearchCV

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection

n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
T, d, q = 10, 8, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)
print(f"T*d = {T * d}")

searches = {
    "FCN": GridSearchCV(SparseTokenFCN(random_state=0),
                        {"hidden_width": [16, 32, 64, 256]}, cv=3, n_jobs=-1),
    "transformer": GridSearchCV(SparseTokenTransformer(random_state=0),
                                {"pe_dim": [8, 24, 56]}, cv=3, n_jobs=-1),
}
for name, search in searches.items():
    search.fit(X, y)
    res = search.cv_results_
    for params, r2 in zip(res["params"], res["mean_test_score"]):
        width = params.get("hidden_width", d + params.get("pe_dim", 0))
        print(f"{name:12s} width {width:4d}  {params}  cross-validated R^2 {r2:.3f}")
