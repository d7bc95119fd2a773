import pickle

import pytest
from sklearn.base import clone

from sparse_token_estimators import SparseTokenFCN, SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.callbacks import AlignmentRecorder
from sparse_token_estimators.theory import identity_alignment


@pytest.fixture(scope="module")
def task():
    return make_sparse_selection(1500, 8, 4, 2, random_state=0)


@pytest.fixture(scope="module")
def fitted(task):
    est = SparseTokenTransformer(pe_dim=16, max_epochs=6, random_state=0,
                                 callbacks=[AlignmentRecorder()])
    return est.fit(*task)


def test_one_value_per_epoch_ending_at_the_fitted_W(fitted):
    alignment = fitted.history_[:, "alignment"]
    scale = fitted.history_[:, "w_scale"]
    assert len(alignment) == len(scale) == 6
    assert alignment[-1] == pytest.approx(identity_alignment(fitted.module_.W))
    assert scale[-1] == pytest.approx(float(fitted.module_.W.detach().diagonal().mean()))


def test_stochastic_alignment_rises(fitted):
    alignment = fitted.history_[:, "alignment"]
    assert alignment[-1] > 0.8
    assert fitted.history_[:, "w_scale"][-1] > fitted.history_[:, "w_scale"][0] > 0


def test_custom_keys_and_no_scale(task):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=2, random_state=0,
                                 callbacks=[AlignmentRecorder(key="cos", scale_key=None)])
    est.fit(*task)
    assert len(est.history_[:, "cos"]) == 2
    assert "w_scale" not in est.history_[-1]


def test_fcn_has_no_W(task):
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, callbacks=[AlignmentRecorder()])
    with pytest.raises(ValueError, match="square matrix module_.W"):
        est.fit(*task)


def test_pickles_and_clones_with_the_estimator(fitted, task):
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored.history_[:, "alignment"] == fitted.history_[:, "alignment"]
    refit = clone(fitted).fit(*task)  # same random_state: the same curve again
    assert refit.history_[:, "alignment"] == pytest.approx(fitted.history_[:, "alignment"])
