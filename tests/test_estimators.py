import copy
import functools

import conftest as catalogue
import numpy as np
import pytest
import torch
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from skorch.callbacks import Callback, Checkpoint, EarlyStopping, EpochScoring
from skorch.dataset import ValidSplit

from sparse_token_estimators import (
    FlattenTokens,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators._device import resolve_device
from sparse_token_estimators.modules import SparseTokenAttention

#: the catalogue's paper estimators (tests/conftest.py), with the package's batch size
PAPER_ESTIMATORS = ("transformer", "transformer-fixed", "fcn")


@pytest.fixture(params=PAPER_ESTIMATORS)
def make_estimator(request):
    """Each paper estimator kind, as a factory of unfitted instances."""
    return functools.partial(catalogue.make_estimator, request.param, batch_size=256)


@pytest.fixture(params=["fitted_transformer", "fitted_fixed_transformer", "fitted_fcn"])
def fitted(request):
    """Each fitted session estimator (shared: do not modify, copy it)."""
    return request.getfixturevalue(request.param)


def _selected_mass(attention, X):
    return (attention * X[..., -1]).sum(axis=1)


# -- the example ----------------------------------------------------------


def test_user_example_at_reduced_size(task, test_task, tiny_task):
    X, y = task
    X_test, y_test = test_task
    est = SparseTokenTransformer(pe_dim=32, lr=0.05, max_epochs=15, random_state=0).fit(X, y)
    assert est.score(X_test, y_test) > 0.9
    X_long, y_long = make_sparse_selection(200, seq_len=40, token_dim=4, n_selected=2)
    assert est.predict(X_long).shape == (200, 4)

    X, y = tiny_task
    fcn_search = GridSearchCV(SparseTokenFCN(max_epochs=1), {"hidden_width": [16, 64]},
                              cv=3).fit(X, y)
    assert [p["hidden_width"] for p in fcn_search.cv_results_["params"]] == [16, 64]
    best = fcn_search.best_estimator_  # refit with the best width, found by name
    assert best.module_.state_dict()["net.1.weight"].shape[0] == \
        fcn_search.best_params_["hidden_width"]
    pe_search = GridSearchCV(SparseTokenTransformer(max_epochs=1), {"pe_dim": [8, 32]},
                             cv=2, n_jobs=2).fit(X, y)
    assert pe_search.best_estimator_.module_.W.shape[0] == pe_search.best_params_["pe_dim"]
    ridge = make_pipeline(FlattenTokens(), Ridge()).fit(X, y)
    assert ridge.predict(X_test).shape == (500, 4)


@pytest.mark.slow
def test_user_example_as_written():
    X, y = make_sparse_selection(n_samples=20000, seq_len=20, token_dim=8, n_selected=3,
                                 random_state=0)
    X_test, y_test = make_sparse_selection(2000, 20, 8, 3, random_state=1)
    est = SparseTokenTransformer(random_state=0).fit(X, y)  # learns at defaults
    assert est.score(X_test, y_test) >= 0.9
    X_long, y_long = make_sparse_selection(2000, seq_len=80, token_dim=8, n_selected=3)
    assert est.predict(X_long).shape == (2000, 8)
    GridSearchCV(SparseTokenFCN(), {"hidden_width": [16, 64, 256, 1024]}, cv=3).fit(X, y)
    GridSearchCV(SparseTokenTransformer(), {"pe_dim": [8, 32, 128]}, n_jobs=2).fit(X, y)
    make_pipeline(FlattenTokens(), Ridge()).fit(X, y)


# -- scikit-learn parameters ------------------------------------------------------


def test_widths_are_top_level_parameters():
    params = SparseTokenTransformer(pe_dim=12, n_pe_draws=2).get_params()
    assert params["pe_dim"] == 12 and params["n_pe_draws"] == 2
    assert {"positional_encoding", "max_seq_len", "output_map", "random_state", "lr",
            "max_epochs", "batch_size", "train_split", "device"} <= set(params)
    params = SparseTokenFCN(hidden_width=12, n_hidden_layers=3).get_params()
    assert params["hidden_width"] == 12 and params["n_hidden_layers"] == 3


def test_defaults_have_no_split_no_printing_and_auto_device():
    for est in (SparseTokenTransformer(), SparseTokenFCN()):
        params = est.get_params()
        assert params["train_split"] is None
        assert params["verbose"] == 0
        assert params["device"] == "auto"


def test_set_params_and_clone(make_estimator, tiny_task):
    est = make_estimator(max_epochs=1, random_state=3)
    assert est.set_params(lr=0.5, batch_size=7) is est
    assert est.get_params()["lr"] == 0.5 and est.batch_size == 7
    est.fit(*tiny_task)
    twin = clone(est)
    assert not hasattr(twin, "module_") and not hasattr(twin, "n_features_in_")
    for name, value in est.get_params(deep=False).items():
        assert twin.get_params(deep=False)[name] == value, name
    with pytest.raises(ValueError, match="Invalid parameter"):
        est.set_params(no_such_parameter=1)


def test_fitted_sizes_are_attributes_not_parameters(make_estimator, tiny_task):
    est = make_estimator(max_epochs=1, random_state=0)
    before = est.get_params(deep=False)
    X, y = tiny_task
    est.fit(X, y)
    assert est.get_params(deep=False).keys() == before.keys()
    for name, value in before.items():
        assert est.get_params(deep=False)[name] == value, name
    assert est.n_features_in_ == X.shape[-1] == 5
    assert est.token_dim_ == 4 and est.seq_len_ == 10
    # a new fit learns new sizes
    X2, y2 = make_sparse_selection(50, seq_len=12, token_dim=3, n_selected=2, random_state=0)
    est.fit(X2, y2)
    assert (est.n_features_in_, est.token_dim_, est.seq_len_) == (4, 3, 12)
    assert est.predict(X2).shape == (50, 3)


@pytest.mark.parametrize("width, new_width, warm_start", [
    ("hidden_width", 24, False), ("hidden_width", 24, True),
    ("pe_dim", 24, False), ("pe_dim", 24, True),
])
def test_set_width_on_a_fitted_net_is_honoured_by_the_next_fit(width, new_width, warm_start,
                                                                 tiny_task):
    Estimator = SparseTokenFCN if width == "hidden_width" else SparseTokenTransformer
    est = Estimator(**{width: 8}, max_epochs=1, warm_start=warm_start, random_state=0)
    est.fit(*tiny_task)
    est.set_params(**{width: new_width})
    est.fit(*tiny_task)
    if width == "hidden_width":
        assert est.module_.net[1].out_features == new_width
    else:
        assert est.module_.W.shape == (new_width, new_width)
    assert est.get_params()[width] == new_width
    assert est.predict(tiny_task[0]).shape == (200, 4)


def test_grid_search_finds_the_widths_by_name(tiny_task):
    X, y = tiny_task
    search = GridSearchCV(SparseTokenFCN(max_epochs=2, random_state=0),
                          {"hidden_width": [4, 32], "n_hidden_layers": [1, 2]}, cv=2).fit(X, y)
    assert len(search.cv_results_["params"]) == 4
    best = search.best_estimator_
    assert best.module_.net[1].out_features == search.best_params_["hidden_width"]
    search = GridSearchCV(SparseTokenTransformer(max_epochs=2, random_state=0),
                          {"pe_dim": [4, 16], "positional_encoding": ["stochastic", "fixed"]},
                          cv=2).fit(X, y)
    assert search.best_estimator_.module_.W.shape[0] == search.best_params_["pe_dim"]
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_grid_search_in_two_worker_processes_matches_one_process(tiny_task):
    X, y = tiny_task
    base = SparseTokenTransformer(max_epochs=2, random_state=0)
    grid = {"pe_dim": [8, 16]}
    serial = GridSearchCV(base, grid, cv=2).fit(X, y)
    parallel = GridSearchCV(base, grid, cv=2, n_jobs=2).fit(X, y)
    np.testing.assert_allclose(parallel.cv_results_["mean_test_score"],
                               serial.cv_results_["mean_test_score"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(parallel.predict(X), serial.predict(X), rtol=1e-4, atol=1e-5)


# -- random_state and determinism -------------------------------------------------


def test_same_random_state_same_model(make_estimator, tiny_task, test_task):
    X, y = tiny_task
    torch.manual_seed(1)  # the global torch RNG must not matter
    a = make_estimator(max_epochs=2, random_state=5).fit(X, y)
    torch.manual_seed(2)
    b = make_estimator(max_epochs=2, random_state=5).fit(X, y)
    c = make_estimator(max_epochs=2, random_state=6).fit(X, y)
    for pa, pb in zip(a.module_.parameters(), b.module_.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    np.testing.assert_array_equal(a.predict(test_task[0]), b.predict(test_task[0]))
    assert not np.allclose(a.predict(test_task[0]), c.predict(test_task[0]))


def test_random_state_accepts_a_random_state_instance(tiny_task):
    a = SparseTokenFCN(hidden_width=8, max_epochs=1,
                       random_state=np.random.RandomState(0)).fit(*tiny_task)
    b = SparseTokenFCN(hidden_width=8, max_epochs=1,
                       random_state=np.random.RandomState(0)).fit(*tiny_task)
    np.testing.assert_array_equal(a.predict(tiny_task[0]), b.predict(tiny_task[0]))


def test_predict_is_a_function_of_each_sample(fitted, test_task):
    X = test_task[0]
    reference = fitted.predict(X)
    np.testing.assert_array_equal(fitted.predict(X), reference)  # repeatable
    perm = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(fitted.predict(X[perm]), reference[perm], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fitted.predict(X[3:4]), reference[3:4], rtol=1e-5, atol=1e-6)
    other = make_sparse_selection(40, 10, 4, 2, random_state=9)[0]
    mixed = fitted.predict(np.concatenate([other, X[:5]]))[40:]
    np.testing.assert_allclose(mixed, reference[:5], rtol=1e-5, atol=1e-6)
    rebatched = copy.deepcopy(fitted).set_params(batch_size=7)
    np.testing.assert_allclose(rebatched.predict(X), reference, rtol=1e-5, atol=1e-6)


# -- what the transformer learns --------------------------------------------------


def test_transformer_learns_and_attends_to_the_selected_tokens(fitted_transformer, test_task):
    X, y = test_task
    assert fitted_transformer.score(X, y) > 0.9
    attention = fitted_transformer.predict_attention(X)
    assert _selected_mass(attention, X).mean() > 0.8


def test_score_is_r2_of_predict(fitted, test_task):
    X, y = test_task
    assert fitted.score(X, y) == pytest.approx(r2_score(y, fitted.predict(X)), rel=1e-5)


@pytest.mark.parametrize("seq_len", [3, 10, 40])
def test_predict_attention_rows_sum_to_one(fitted_transformer, fitted_fixed_transformer, seq_len):
    X, _ = make_sparse_selection(30, seq_len, 4, min(2, seq_len), random_state=0)
    for est in (fitted_transformer, fitted_fixed_transformer):
        if est.positional_encoding == "fixed" and seq_len > est.max_seq_len:
            continue
        attention = est.predict_attention(X)
        assert attention.shape == (30, seq_len) and attention.dtype == np.float32
        assert (attention >= 0).all()
        np.testing.assert_allclose(attention.sum(axis=1), 1, rtol=1e-5)


def test_predict_attention_is_per_sample_and_matches_predict(fitted_transformer, test_task):
    X = test_task[0]
    attention = fitted_transformer.predict_attention(X)
    np.testing.assert_allclose(fitted_transformer.predict_attention(X[::-1]), attention[::-1],
                               rtol=1e-5, atol=1e-7)
    # predict is the attention-weighted average of the tokens
    np.testing.assert_allclose((attention[..., None] * X[..., :-1]).sum(1),
                               fitted_transformer.predict(X), rtol=1e-4, atol=1e-5)


def test_stochastic_transformer_predicts_at_longer_lengths(fitted_transformer):
    for seq_len in (20, 40, 300):  # beyond max_seq_len too: stochastic has no table
        X, y = make_sparse_selection(300, seq_len, 4, 2, random_state=seq_len)
        assert fitted_transformer.predict(X).shape == (300, 4)
        if seq_len == 20:
            assert fitted_transformer.score(X, y) > 0.7  # it length-generalises


def test_fixed_transformer_refuses_lengths_past_its_table(fitted_fixed_transformer):
    X, _ = make_sparse_selection(20, 16, 4, 2, random_state=0)
    assert fitted_fixed_transformer.predict(X).shape == (20, 4)  # untrained, but defined
    X, y = make_sparse_selection(20, 17, 4, 2, random_state=0)
    for call in (fitted_fixed_transformer.predict, fitted_fixed_transformer.predict_attention):
        with pytest.raises(ValueError, match=r"seq_len 17 .* max_seq_len=16.*stochastic"):
            call(X)
    with pytest.raises(ValueError, match="max_seq_len=16"):
        fitted_fixed_transformer.score(X, y)
    est = SparseTokenTransformer(positional_encoding="fixed", max_seq_len=8, max_epochs=1)
    with pytest.raises(ValueError, match=r"seq_len 17 .* max_seq_len=8"):
        est.fit(X, y)


@pytest.mark.parametrize("seq_len", [9, 11])
def test_fcn_refuses_other_lengths(fitted_fcn, seq_len):
    X, y = make_sparse_selection(20, seq_len, 4, 2, random_state=0)
    match = f"seq_len {seq_len}, but this SparseTokenFCN was fitted on seq_len 10"
    for call in (fitted_fcn.predict, lambda X: fitted_fcn.score(X, y)):
        with pytest.raises(ValueError, match=match):
            call(X)


def test_averaging_positional_draws_lowers_the_error(fitted_transformer, test_task):
    X, y = (torch.as_tensor(a) for a in test_task)
    losses = {}
    for n_pe_draws in (1, 16):
        module = SparseTokenAttention(4, pe_dim=32, n_pe_draws=n_pe_draws).eval()
        module.load_state_dict(fitted_transformer.module_.state_dict())
        with torch.no_grad():
            losses[n_pe_draws] = ((module(X) - y) ** 2).sum(1).mean().item()
    assert losses[16] < losses[1]


# -- skorch features --------------------------------------------------------------


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_training_data_is_checked_once_per_call(method, make_estimator, tiny_task, monkeypatch):
    # skorch's fit calls partial_fit; the checks (a pass over all of X) run once.
    import sparse_token_estimators._layout as estimators

    calls = []

    def counting(X, **kwargs):
        calls.append(kwargs)
        return check_tokens(X, **kwargs)

    check_tokens = estimators.check_tokens
    monkeypatch.setattr(estimators, "check_tokens", counting)
    est = make_estimator(max_epochs=1, random_state=0)
    getattr(est, method)(*tiny_task)
    assert calls == [{"token_dim": None}]
    getattr(est.set_params(warm_start=True), method)(*tiny_task)
    assert calls[1:] == [{"token_dim": est.token_dim_}]
    assert len(est.history) == 2


def test_warm_start_fit_refuses_what_the_model_cannot_continue_on(tiny_task):
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, warm_start=True, random_state=0)
    est.fit(*tiny_task)
    weights = [p.detach().clone() for p in est.module_.parameters()]
    for X, y, match in [(*make_sparse_selection(20, 12, 4, 2, random_state=0),
                         "seq_len 12, but this SparseTokenFCN was fitted on seq_len 10"),
                        (*make_sparse_selection(20, 10, 3, 2, random_state=0), "token_dim")]:
        with pytest.raises(ValueError, match=match):
            est.fit(X, y)
    assert len(est.history) == 1
    assert all(torch.equal(a, b) for a, b in zip(weights, est.module_.parameters()))
    est.set_params(warm_start=False).fit(*make_sparse_selection(20, 12, 4, 2, random_state=0))
    assert est.seq_len_ == 12


def test_skorch_features_still_work(tiny_task):
    seen = []

    class Record(Callback):
        def on_epoch_end(self, net, **kwargs):
            seen.append(len(net.history))

    est = SparseTokenFCN(hidden_width=8, max_epochs=4, optimizer=torch.optim.SGD, lr=0.01,
                         train_split=ValidSplit(4), callbacks=[Record()], random_state=0)
    est.fit(*tiny_task)
    assert seen == [1, 2, 3, 4]
    assert "valid_loss" in est.history[-1] and isinstance(est.optimizer_, torch.optim.SGD)
    stopping = EarlyStopping(monitor="train_loss", patience=1, threshold=10.0)
    est = SparseTokenTransformer(pe_dim=8, max_epochs=20, callbacks=[stopping])
    assert len(est.fit(*tiny_task).history_) < 20


def test_no_internal_validation_split_by_default(make_estimator, tiny_task):
    est = make_estimator(max_epochs=1, batch_size=64).fit(*tiny_task)
    batches = est.history[-1, "batches"]
    assert "valid_loss" not in est.history[-1]
    assert len(batches) == 4  # all 200 samples train: 64 + 64 + 64 + 8
    assert sum(b["train_batch_size"] for b in batches) == 200


def test_verbose_zero_prints_nothing(make_estimator, tiny_task, capfd):
    est = make_estimator(max_epochs=2).fit(*tiny_task)
    est.predict(tiny_task[0])
    est.score(*tiny_task)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    make_estimator(max_epochs=1, verbose=1).fit(*tiny_task)
    assert "train_loss" in capfd.readouterr().out


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_cpu_and_auto_devices(device, tiny_task):
    est = SparseTokenFCN(hidden_width=8, max_epochs=1, device=device).fit(*tiny_task)
    assert est.get_params()["device"] == device  # "auto" is resolved, not written back
    expected = "cuda" if device == "auto" and torch.cuda.is_available() else "cpu"
    assert next(est.module_.parameters()).device.type == expected
    assert isinstance(est.predict(tiny_task[0]), np.ndarray)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_raises_a_clear_error(device, tiny_task):
    est = SparseTokenTransformer(pe_dim=8, max_epochs=1, device=device)
    with pytest.raises(ValueError, match="no CUDA GPU is available.*device='cpu'"):
        est.fit(*tiny_task)


def test_device_resolution_with_gpus(monkeypatch):
    # what "auto" and "cuda:N" do on a machine with one GPU, without needing one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:0") == "cuda:0" and resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="only 1 CUDA GPU"):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"


def test_unknown_device_raises(tiny_task):
    with pytest.raises(ValueError, match=r"The 'device' parameter of SparseTokenFCN must be "
                                         r"None or 'auto', 'cpu', 'cuda', 'cuda:N'.*Got 'gpu'"):
        SparseTokenFCN(hidden_width=8, max_epochs=1, device="gpu").fit(*tiny_task)


def test_regressors_have_no_predict_proba(fitted):
    assert not hasattr(fitted, "predict_proba")


def test_initialize_without_data_explains(make_estimator):
    est = make_estimator()
    missing = "seq_len and token_dim are" if isinstance(est, SparseTokenFCN) else "token_dim is"
    with pytest.raises(ValueError, match=rf"initialize\(\) builds the module from the "
                                         rf"parameters, without data, and {missing} None.*"
                                         rf"call fit\(X, y\)"):
        est.initialize()
    assert not est.initialized_ and not hasattr(est, "module_")


# -- input checking (part 5) ------------------------------------------------------


def test_predict_before_fit_raises_not_fitted(make_estimator, tiny_task):
    est = make_estimator()
    for call in (est.predict, lambda X: est.score(X, tiny_task[1])):
        with pytest.raises(NotFittedError):
            call(tiny_task[0])
    if isinstance(est, SparseTokenTransformer):
        with pytest.raises(NotFittedError):
            est.predict_attention(tiny_task[0])


def test_other_dtypes_and_nested_lists_are_accepted(fitted, tiny_task):
    X, y = tiny_task
    expected = fitted.predict(X)
    np.testing.assert_allclose(fitted.predict(X.astype(np.float64)), expected, rtol=1e-6)
    np.testing.assert_allclose(fitted.predict(X.tolist()), expected, rtol=1e-6)
    X_int = np.rint(X).astype(np.int64)
    np.testing.assert_allclose(fitted.predict(X_int), fitted.predict(X_int.astype(np.float32)))
    assert fitted.predict(X).dtype == np.float64  # as scikit-learn regressors
    # views with negative or odd strides
    np.testing.assert_allclose(fitted.predict(X[::-1]), expected[::-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fitted.predict(np.asfortranarray(X)), expected, rtol=1e-5,
                               atol=1e-6)


def test_fit_accepts_float64_int_and_lists(tiny_task):
    X, y = tiny_task
    reference = SparseTokenFCN(hidden_width=8, max_epochs=1, random_state=0).fit(X, y)
    for X_in, y_in in [(X.astype(np.float64), y.astype(np.float64)),
                       (X.tolist(), y.tolist())]:
        est = SparseTokenFCN(hidden_width=8, max_epochs=1, random_state=0).fit(X_in, y_in)
        np.testing.assert_allclose(est.predict(X), reference.predict(X), rtol=1e-6)
    reversed_views = SparseTokenFCN(hidden_width=8, max_epochs=1).fit(X[::-1], y[::-1])
    assert reversed_views.predict(X[::-1]).shape == (200, 4)
    X_int, y_int = np.rint(X).astype(int), np.rint(y).astype(int)
    est = SparseTokenTransformer(pe_dim=8, max_epochs=1).fit(X_int, y_int)
    assert est.score(X_int, y_int) <= 1


def _bad_X(kind):
    X, y = make_sparse_selection(20, 10, 4, 2, random_state=0)
    X = X.copy()
    if kind == "nan":
        X[3, 2, 1] = np.nan
    elif kind == "inf":
        X[3, 2, 1] = np.inf
    elif kind == "2d":
        X = X.reshape(20, -1)
    elif kind == "4d":
        X = X[np.newaxis]
    elif kind == "indicator":
        X[5, 0, -1] = 0.5
    elif kind == "nothing selected":
        X[4, :, -1] = 0.0
    elif kind == "token_dim":
        X = np.concatenate([X[..., :1], X], axis=-1)
    return X, y


BAD_X = {
    "nan": r"X contains NaN or infinity in 1 sample\(s\)",
    "inf": r"X contains NaN or infinity in 1 sample\(s\)",
    "2d": r"X must be a 3-D array of shape \(n_samples, seq_len, token_dim \+ 1\)",
    "4d": "X must be a 3-D array",
    "indicator": r"selection indicator and must hold only 0.0 and 1.0; found \[0.5\]",
    "nothing selected": r"1 sample\(s\) of X select no token \(e.g. sample 4\)",
}


@pytest.mark.parametrize("kind", list(BAD_X))
def test_bad_X_at_fit_predict_and_score(kind, make_estimator, fitted_fcn):
    X, y = _bad_X(kind)
    with pytest.raises(ValueError, match=BAD_X[kind]):
        make_estimator(max_epochs=1).fit(X, y)
    with pytest.raises(ValueError, match=BAD_X[kind]):
        fitted_fcn.predict(X)
    with pytest.raises(ValueError, match=BAD_X[kind]):
        fitted_fcn.score(X, y)


def test_bad_X_for_partial_fit_and_predict_attention(fitted_transformer):
    X, y = _bad_X("indicator")
    with pytest.raises(ValueError, match="indicator"):
        SparseTokenTransformer().partial_fit(X, y)
    with pytest.raises(ValueError, match="indicator"):
        fitted_transformer.predict_attention(X)


def test_another_token_dim_at_predict(fitted, tiny_task):
    X, y = _bad_X("token_dim")
    match = r"X has token_dim 5 .* fitted with token_dim 4"
    with pytest.raises(ValueError, match=match):
        fitted.predict(X)
    with pytest.raises(ValueError, match=match):
        fitted.score(X, np.zeros((20, 5)))
    if isinstance(fitted, SparseTokenTransformer):
        with pytest.raises(ValueError, match=match):
            fitted.predict_attention(X)


@pytest.mark.parametrize("make_y, match", [
    (lambda y: y[:-1], r"y must have shape \(n_samples, token_dim\) = \(20, 4\).*got \(19, 4\)"),
    (lambda y: y[:, :3], r"= \(20, 4\).*got \(20, 3\)"),
    (lambda y: y[:, 0], r"got \(20,\)"),
    (lambda y: np.where(np.arange(4) == 2, np.nan, y), r"y contains NaN or infinity"),
    (lambda y: None, "y is required"),
])
def test_bad_y_at_fit_and_score(make_y, match, fitted_fcn):
    X, y = make_sparse_selection(20, 10, 4, 2, random_state=0)
    with pytest.raises(ValueError, match=match):
        SparseTokenFCN(max_epochs=1).fit(X, make_y(y))
    with pytest.raises(ValueError, match=match):
        fitted_fcn.score(X, make_y(y))


def test_length_mismatch_names_both_lengths():
    X, y = make_sparse_selection(20, 10, 4, 2, random_state=0)
    with pytest.raises(ValueError, match=r"\(21, 4\)"):
        SparseTokenTransformer(max_epochs=1).fit(X, np.concatenate([y, y[:1]]))


def test_one_dimensional_target_gets_a_reshape_hint():
    X, y = make_sparse_selection(20, 10, 1, 2, random_state=0)
    with pytest.raises(ValueError, match=r"y.reshape\(-1, 1\)"):
        SparseTokenFCN(max_epochs=1).fit(X, y.ravel())


# -- one fitted model, many callers (issue 20) ------------------------------------


def test_predict_while_partial_fit_runs_in_another_thread_waits_for_it(tiny_task):
    # Training and prediction hold the estimator's lock: 8 threads
    # predicting while the paper's model trains used to see a half-updated
    # module (RuntimeError: shape ... is invalid) and change its weights.
    from concurrent.futures import ThreadPoolExecutor

    X, y = tiny_task
    make = functools.partial(SparseTokenTransformer, pe_dim=16, n_pe_draws=1, max_epochs=1,
                             batch_size=20, random_state=0)
    est, alone = make().fit(X, y), make().fit(X, y)
    before = est.predict(X[:16])
    alone.partial_fit(X, y)

    def predict(_):
        return [est.predict(X[:16]) for _ in range(10)]

    with ThreadPoolExecutor(9) as pool:
        training = pool.submit(est.partial_fit, X, y)
        predictions = [p for batch in pool.map(predict, range(8)) for p in batch]
        assert training.result() is est
    after = est.predict(X[:16])
    assert_same_weights(weights(est), weights(alone))  # as if trained alone
    assert_array_equal(after, alone.predict(X[:16]))
    # every prediction saw the weights before or after the whole partial_fit
    assert all(np.array_equal(p, before) or np.array_equal(p, after) for p in predictions)


class _PredictInAHelperThread(Callback):
    """At each epoch's end, predict from a thread it starts and joins (a bounded join:
    a deadlock fails the test instead of hanging it), and from its own thread."""

    def __init__(self, X):
        self.X = X

    def initialize(self):
        self.results, self.stuck = [], 0
        return self

    def on_epoch_end(self, net, **kwargs):
        import threading

        out = {}
        helper = threading.Thread(target=lambda: out.setdefault("y", net.predict(self.X)),
                                  daemon=True)
        helper.start()
        helper.join(60)
        self.stuck += helper.is_alive()
        self.results.append((out.get("y"), net.predict(self.X)))


def test_predict_from_a_thread_an_epoch_end_callback_joins_is_served(tiny_task):
    X, y = tiny_task
    spy = _PredictInAHelperThread(X[:16])
    est = SparseTokenFCN(hidden_width=8, max_epochs=3, batch_size=50, random_state=0,
                         callbacks=[("helper", spy)]).fit(X, y)
    spy = dict(est.callbacks_)["helper"]
    assert spy.stuck == 0 and len(spy.results) == 3  # no deadlock
    # served with the weights of the epoch's last step: as the fitting thread predicts
    for helper, own in spy.results:
        assert_array_equal(helper, own)
    assert_array_equal(spy.results[-1][0], est.predict(X[:16]))


class HalfwayHook(torch.optim.SGD):
    """SGD (lr 0.1) that calls ``HalfwayHook.hook()`` once its first parameter is updated
    and the others not yet (a module level class: the estimator must pickle)."""

    hook = None

    def step(self, closure=None):
        with torch.enable_grad():
            loss = closure()  # skorch's: the forward, the loss and the gradients
        params = [p for group in self.param_groups for p in group["params"]
                  if p.grad is not None]
        with torch.no_grad():
            for i, p in enumerate(params):
                p.sub_(0.1 * p.grad)
                if i == 0 and HalfwayHook.hook is not None:
                    HalfwayHook.hook()
        return loss


class StepWeights(Callback):
    """The weights after each training step, in ``seen``."""

    def initialize(self):
        self.seen = []
        return self

    def on_batch_end(self, net, training=False, **kwargs):
        if training:
            self.seen.append({k: v.clone() for k, v in net.module_.state_dict().items()})


def test_pickling_while_partial_fit_runs_in_another_thread_holds_a_whole_step(tiny_task):
    """A pickle taken mid-step (the optimizer halfway through its parameters) waits for
    the step: the pickled weights are those of a finished step, never half-updated."""
    import pickle
    import threading

    X, y = tiny_task
    pickles, picklers = [], []

    def halfway():
        if not picklers:  # the first step only
            picklers.append(threading.Thread(
                target=lambda: pickles.append(pickle.dumps(est)), daemon=True))
            picklers[0].start()
            picklers[0].join(2)  # bounded: if it waits, it is served at the epoch's end

    est = SparseTokenFCN(hidden_width=8, max_epochs=1, batch_size=50, random_state=0,
                         optimizer=HalfwayHook, lr=0.1, callbacks=[("steps", StepWeights())],
                         seq_len=X.shape[1], token_dim=X.shape[2] - 1).initialize()
    finished = dict(est.callbacks_)["steps"].seen
    finished.append({k: v.clone() for k, v in est.module_.state_dict().items()})
    HalfwayHook.hook = halfway
    try:
        est.partial_fit(X, y)
    finally:
        HalfwayHook.hook = None
    picklers[0].join(60)
    state = pickle.loads(pickles[0]).module_.state_dict()
    assert any(all(torch.equal(state[k], w[k]) for k in state) for w in finished)


def test_predict_from_four_threads_is_the_sequential_prediction(fitted_transformer, test_task):
    # device "auto": predict used to resolve it by writing to the estimator,
    # so concurrent calls saw "cpu" in get_params and each other's state.
    from concurrent.futures import ThreadPoolExecutor

    # Sequences of two lengths: the module's prediction-time draws used to be
    # cached per length and shared between calls.
    est = copy.deepcopy(fitted_transformer)
    assert est.get_params()["device"] == "auto"
    X = test_task[0][:8]
    X_long = make_sparse_selection(8, seq_len=2 * X.shape[1], token_dim=X.shape[2] - 1,
                                   n_selected=2, random_state=5)[0]
    expected = {0: est.predict(X), 1: est.predict(X_long)}
    params, attributes = est.get_params(deep=False), dict(vars(est))

    def calls(worker):
        return [(i % 2, est.predict(X_long if i % 2 else X))
                for i in range(worker, worker + 1000)]

    with ThreadPoolExecutor(4) as pool:
        results = [y for batch in pool.map(calls, range(4)) for y in batch]
    assert len(results) == 4000
    for which, y in results:
        assert_array_equal(y, expected[which])
    assert est.get_params(deep=False) == params and est.device == "auto"
    assert not est.module_.training  # not even the module's mode was flipped
    assert vars(est).keys() == attributes.keys()
    assert all(vars(est)[key] is value for key, value in attributes.items())


def test_epoch_scoring_with_a_scikit_learn_scorer_during_fit(tiny_task):
    # skorch hands the validation Dataset to predict (issue 20, point 3).
    from skorch.callbacks import EpochScoring

    X, y = tiny_task
    est = SparseTokenFCN(hidden_width=16, max_epochs=2, random_state=0,
                         train_split=ValidSplit(5),
                         callbacks=[EpochScoring("r2", lower_is_better=False)]).fit(X, y)
    scores = est.history_[:, "r2"]
    assert len(scores) == 2 and np.isfinite(scores).all()
    # the last one is the R^2 of the fitted model on the held-out fifth
    held_out = slice(0, len(X) // 5)  # ValidSplit(5) of a regressor: the first fold
    assert scores[-1] == pytest.approx(est.score(X[held_out], y[held_out]), abs=1e-6)


VALIDATION_CALLBACKS = {
    "EarlyStopping": (lambda path: EarlyStopping(), "'valid_loss'", "monitor='train_loss'"),
    "Checkpoint": (lambda path: Checkpoint(dirname=path), "'valid_loss_best'",
                   "monitor='train_loss_best'"),
    "EpochScoring": (lambda path: EpochScoring("r2"), "on_train=False", "on_train=True"),
}


@pytest.mark.parametrize("name", list(VALIDATION_CALLBACKS))
def test_callbacks_that_need_a_validation_split_say_so_before_training(name, tiny_task,
                                                                       tmp_path):
    X, y = tiny_task
    make, what, fix = VALIDATION_CALLBACKS[name]
    est = SparseTokenFCN(hidden_width=16, max_epochs=2, random_state=0,
                         callbacks=[make(tmp_path / "cp")])
    with pytest.raises(ValueError) as info:
        est.fit(X, y)
    message = str(info.value)
    assert what in message and fix in message
    assert "train_split=skorch.dataset.ValidSplit(5)" in message
    assert est.history_ is None and not est.initialized_  # before the first epoch
    assert not (tmp_path / "cp" / "params.pt").exists()
    # both ways out work
    est.set_params(train_split=ValidSplit(5)).fit(X, y)
    assert len(est.history_) == 2 and "valid_loss" in est.history_[-1]
    if name == "Checkpoint":
        assert (tmp_path / "cp" / "params.pt").exists()
    if name != "EpochScoring":
        cb = make(tmp_path / "cp2")
        cb.set_params(monitor=fix.split("=")[1].strip("'"))
        est = SparseTokenFCN(hidden_width=16, max_epochs=2, random_state=0,
                             callbacks=[cb]).fit(X, y)
        assert len(est.history_) == 2


# -- clear errors (issue 20, point 6) ---------------------------------------------


def test_predict_attention_with_batch_size_minus_one_is_one_batch(fitted_transformer,
                                                                  test_task):
    est = copy.deepcopy(fitted_transformer)
    X = test_task[0][:50]
    expected = est.predict_attention(X)
    attention = est.set_params(batch_size=-1).predict_attention(X)
    assert attention.shape == expected.shape
    np.testing.assert_allclose(attention, expected, rtol=1e-5, atol=1e-6)


def test_a_float64_default_dtype_is_refused_with_the_fix(tiny_task):
    X, y = tiny_task
    est = SparseTokenFCN(hidden_width=16, max_epochs=1, random_state=0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(TypeError, match=r"torch's default dtype is torch\.float64.*"
                                            r"torch\.set_default_dtype\(torch\.float32\)"):
            est.fit(X, y)
    finally:
        torch.set_default_dtype(default)
    assert not est.initialized_
    assert np.isfinite(est.fit(X, y).predict(X)).all()


def test_score_on_overflowing_outputs_says_why(fitted_fcn, test_task):
    X, y = test_task
    X = X.copy()
    X[..., :-1] = np.float32(3.3e38)  # finite float32 tokens, infinite outputs
    with pytest.raises(ValueError, match=r"returned \d+ non-finite value\(s\).*overflow "
                                         r"float32.*Scale X as the training data"):
        fitted_fcn.score(X, y)


# -- subclassing the base class ---------------------------------------------------


class _SelectedMean(torch.nn.Module):
    """The mean of the selected tokens through a linear map: the least a module needs."""

    def __init__(self, token_dim, bias=True):
        super().__init__()
        self.map = torch.nn.Linear(token_dim, token_dim, bias=bias)

    def forward(self, X):  # X: (B, T, d + 1)
        tokens, indicator = X[..., :-1], X[..., -1:]  # (B, T, d), (B, T, 1)
        return self.map((indicator * tokens).sum(1) / indicator.sum(1))  # (B, d)


def test_a_subclass_declares_only_its_module_parameters_sizes_and_lengths(tiny_task):
    from sparse_token_estimators.estimators import _rules as _params
    from sparse_token_estimators.estimators._base import _SparseTokenRegressor

    class SelectedMean(_SparseTokenRegressor):
        _parameter_rules = {**_params.SKORCH, **_params.COMMON, "bias": [_params.BOOLEAN]}
        _module_params = ("bias",)

        def __init__(self, module=_SelectedMean, *, token_dim=None, bias=True,
                     random_state=None, max_epochs=3, **kwargs):
            super().__init__(module, token_dim=token_dim, random_state=random_state,
                             max_epochs=max_epochs, **kwargs)
            self.bias = bias

        def _module_kwargs(self):
            return {**super()._module_kwargs(), "token_dim": self.token_dim_}

    X, y = tiny_task
    est = SelectedMean(random_state=0, max_epochs=60, lr=0.05, batch_size=50).fit(X, y)
    assert est.score(X, y) > 0.9 and est.predict(X).shape == y.shape  # it learns
    assert_array_equal(clone(est).fit(X, y).predict(X), est.predict(X))  # seeded
    assert SelectedMean(token_dim=4).initialize().module_.map.in_features == 4
    with pytest.raises(ValueError, match="The 'bias' parameter of SelectedMean"):
        SelectedMean(bias="yes").fit(X, y)


def test_every_catalogue_estimator_fits_and_predicts(catalogue_name, fitted_catalogue,
                                                      catalogue_test_task):
    # The catalogue (tests/conftest.py) that the other files draw on: each
    # entry is the variant its name says, and fits and predicts its task.
    est = fitted_catalogue[catalogue_name]
    Estimator, params = catalogue.ESTIMATORS[catalogue_name]
    assert type(est) is Estimator
    assert {k: est.get_params()[k] for k in params} == params
    X, y = catalogue_test_task
    y_pred = est.predict(X)
    assert y_pred.shape == y.shape and np.isfinite(y_pred).all()
    assert len(est.history_) == catalogue.TRAINING["max_epochs"]


def test_skorch_forward_works_with_the_auto_device(fitted_transformer, test_task):
    # skorch's forward reads self.device, which is "auto" outside the estimator's calls
    est = copy.deepcopy(fitted_transformer)
    assert est.device == "auto"
    X = test_task[0][:5]
    assert_array_equal(est.forward(X).numpy().astype(np.float64), est.predict(X))
