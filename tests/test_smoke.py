import numpy as np

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection


def test_transformer_learns_small_task():
    X, y = make_sparse_selection(3000, seq_len=10, token_dim=4, n_selected=2, random_state=0)
    X_test, y_test = make_sparse_selection(500, seq_len=10, token_dim=4, n_selected=2, random_state=1)
    est = SparseTokenTransformer(pe_dim=32, max_epochs=10, random_state=0).fit(X, y)
    assert est.score(X_test, y_test) > 0.8


def test_fcn_predicts_shape():
    X, y = make_sparse_selection(300, seq_len=10, token_dim=4, random_state=0)
    est = SparseTokenFCN(hidden_width=16, max_epochs=1, random_state=0).fit(X, y)
    assert est.predict(X).shape == (300, 4)
    assert np.isfinite(est.predict(X)).all()
