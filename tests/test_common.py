"""scikit-learn's estimator checks, run on task-shaped data.

scikit-learn's own suite (``check_estimator``) runs almost nothing on an
estimator whose tags say it takes 3-D input (``test_sklearn_suite_skips_3d``
pins that). So, as tslearn, sktime and aeon do for their 3-D estimators, the
checks are carried here: those that need no data are scikit-learn's own
functions, called as they are; those that need data are rewritten on data from
``make_sparse_selection``, keeping scikit-learn's name and what it asserts.

Every (estimator, check) pair is one test. ``pytest tests/test_common.py -ra``
prints the counts (passed / xfailed) and the reason of each expected failure;
the expected failures are strict, so one that starts passing is reported.
"""

import functools
import inspect
import os
import pickle
import tempfile
import warnings

import joblib
import numpy as np
import pytest
import torch
from conftest import make_estimator
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.exceptions import NotFittedError, SkipTestWarning
from sklearn.pipeline import make_pipeline
from sklearn.utils import estimator_checks as sk
from sklearn.utils.validation import check_is_fitted
from skorch import NeuralNetRegressor

from sparse_token_estimators import (
    FlattenTokens,
    make_sparse_selection,
)

# The catalogue's estimators (tests/conftest.py) with this file's training
# settings (the FCN and the architectures beyond the paper's two train a
# little longer), and FlattenTokens.
SETTINGS = dict(max_epochs=2, batch_size=16)
MORE_SETTINGS = dict(lr=0.01, max_epochs=3, batch_size=16)


def from_catalogue(name, **settings):
    return functools.partial(make_estimator, name, **settings)


ESTIMATORS = {
    "transformer-stochastic": from_catalogue("transformer", **SETTINGS),
    "transformer-fixed": from_catalogue("transformer-fixed", **SETTINGS),
    "transformer-sinusoidal": from_catalogue("transformer-sinusoidal", **SETTINGS),
    "transformer-learned": from_catalogue("transformer-learned", **SETTINGS),
    "transformer-randomized": from_catalogue("transformer-randomized", **SETTINGS),
    "fcn": from_catalogue("fcn", hidden_width=32, **MORE_SETTINGS),
    "flatten": FlattenTokens,
}
SKORCH = ("fcn", *(name for name in ESTIMATORS if name.startswith("transformer-")))

# The architectures beyond the paper's two (issue 23): the encoder without
# positions, with rotary ones and with a random table encoding; two cells.
MORE_ARCHITECTURES = {
    "encoder-none": from_catalogue("encoder", **MORE_SETTINGS),
    "encoder-rope": from_catalogue("encoder-rope", **MORE_SETTINGS),
    "encoder-randomized": from_catalogue("encoder-randomized", **MORE_SETTINGS),
    "rnn-gru": from_catalogue("rnn", **MORE_SETTINGS),
    "rnn-lstm": from_catalogue("rnn-lstm", **MORE_SETTINGS),
    "ssm": from_catalogue("ssm", d_model=16, **MORE_SETTINGS),
}
ESTIMATORS.update(MORE_ARCHITECTURES)
SKORCH = (*SKORCH, *MORE_ARCHITECTURES)

# Checks that fail for a reason outside this package. Each reason is tested by
# ``test_expected_failures_come_from_skorch`` on a bare skorch NeuralNetRegressor.
EXPECTED_FAILURES = {
    "check_no_attributes_set_in_init": (
        "skorch: NeuralNet.__init__ sets history_, initialized_ and virtual_params_, "
        "and stores routed 'prefix__name' arguments (our iterator_train__shuffle) "
        "as attributes; check_no_attributes_set_in_init_beyond_skorch checks the rest"
    ),
}


def task(n_samples=48, seq_len=5, token_dim=2, seed=0):
    return make_sparse_selection(n_samples, seq_len, token_dim, n_selected=min(2, seq_len),
                                 random_state=seed)


def is_regressor(est):
    return hasattr(est, "predict")


def fitted(est, X=None, y=None):
    if X is None:
        X, y = task()
    return clone(est).fit(X, y)


def row_outputs(est, X):
    """The outputs of every method that returns one row per sample."""
    names = ("predict", "predict_attention", "transform")
    return {name: getattr(est, name)(X) for name in names if hasattr(est, name)}


def assert_same_outputs(est_a, est_b, X_a, X_b=None, **tol):
    X_b = X_a if X_b is None else X_b
    out_a, out_b = row_outputs(est_a, X_a), row_outputs(est_b, X_b)
    assert out_a.keys() == out_b.keys()
    for name in out_a:
        assert_allclose(out_a[name], out_b[name], err_msg=name, **tol)


class NotAnArray:
    """An array-like that is not an ndarray (as scikit-learn's _NotAnArray)."""

    def __init__(self, data):
        self.data = np.asarray(data)

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)


def with_token_dim(X, token_dim):
    """X with its tokens cut or tiled to ``token_dim`` channels, indicator kept."""
    tokens = np.resize(X[..., :-1], X.shape[:2] + (token_dim,))
    return np.concatenate([tokens, X[..., -1:]], axis=-1)


# -- scikit-learn's own checks (no data needed) --------------------------------

SKLEARN_OWN = {
    "all": ["check_estimator_cloneable", "check_estimator_repr",
            "check_estimator_tags_renamed", "check_valid_tag_types",
            "check_no_attributes_set_in_init", "check_parameters_default_constructible",
            "check_get_params_invariance", "check_set_params", "check_mixin_order",
            "check_do_not_raise_errors_in_init_or_set_params",
            # These two give 2-D data, but what they assert (NotFittedError
            # before fit; sparse input refused) comes before any shape check.
            "check_estimators_unfitted", "check_estimator_sparse_tag"],
    "transformer": ["check_transformers_unfitted"],
    # scikit-learn's check_param_validation needs its private constraint classes;
    # the rules are our own (estimators/_rules.py), and tests/test_bad_input.py
    # refuses a bad value of every parameter, by fit and by the rules' table.
    "regressor": [],
}


# -- checks carried over to task-shaped data ------------------------------------

CARRIED = {}


def carried(*, only=None):
    """Register a check; ``only`` is "regressor" or "transformer" (default both)."""
    def register(check):
        CARRIED[check.__name__] = (check, only)
        return check
    return register


@carried()
def check_fit_score_takes_y(est):
    for name in ("fit", "score", "partial_fit", "fit_transform"):
        if hasattr(est, name):
            args = list(inspect.signature(getattr(est, name)).parameters)
            assert args[:2] == ["X", "y"], f"{name}{args}"


@carried()
def check_estimators_fit_returns_self(est):
    X, y = task()
    assert est.fit(X, y) is est
    if hasattr(est, "partial_fit"):
        assert est.partial_fit(X, y) is est


@carried()
def check_estimators_overwrite_params(est):
    before = joblib.hash(est.get_params())
    est.fit(*task())
    assert joblib.hash(est.get_params()) == before


@carried()
def check_dont_overwrite_parameters(est):
    before = dict(vars(est))
    est.fit(*task())
    added = [k for k in vars(est) if k not in before and not k.startswith("_")]
    assert all(k.endswith("_") for k in added), added
    changed = [k for k in before if not k.endswith("_") and vars(est)[k] is not before[k]]
    assert not changed, changed


@carried()
def check_dict_unchanged(est):
    X, y = task()
    est.fit(X, y)
    for name in ("predict", "predict_attention", "transform", "score"):
        if hasattr(est, name):
            before = dict(vars(est))
            getattr(est, name)(*((X, y) if name == "score" else (X,)))
            assert vars(est).keys() == before.keys(), name
            assert all(vars(est)[k] is v for k, v in before.items()), name


@carried()
def check_estimators_unfitted(est):
    X, y = task()
    for name in ("predict", "predict_attention", "transform", "score"):
        if hasattr(est, name):
            with pytest.raises(NotFittedError):
                getattr(est, name)(*((X, y) if name == "score" else (X,)))


@carried()
def check_fit_check_is_fitted(est):
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    est.fit(*task())
    check_is_fitted(est)


@carried()
def check_n_features_in(est):
    assert not hasattr(est, "n_features_in_")
    est.fit(*task(token_dim=3))
    assert est.n_features_in_ == 4  # token_dim + 1, the last axis of X


@carried()
def check_n_features_in_after_fitting(est):
    X, y = task(token_dim=2)
    est.fit(X, y)
    X_bad = with_token_dim(X, 3)
    for name in ("predict", "predict_attention", "transform", "score", "partial_fit"):
        if hasattr(est, name):
            with pytest.raises(ValueError, match="token_dim 3.*fitted with token_dim 2"):
                getattr(est, name)(*((X_bad, y) if name in ("score", "partial_fit") else (X_bad,)))


@carried()
def check_estimators_dtypes(est):
    X, y = task()
    tokens = np.round(3 * X[..., :-1])
    for dtype in (np.float32, np.float64, np.int32, np.int64):
        X_typed = np.concatenate([tokens, X[..., -1:]], axis=-1).astype(dtype)
        out = row_outputs(clone(est).fit(X_typed, y), X_typed)
        assert all(np.isfinite(v).all() for v in out.values()), dtype


@carried(only="regressor")
def check_regressors_int(est):
    X, y = task()
    X_int = np.concatenate([np.round(3 * X[..., :-1]), X[..., -1:]], axis=-1).astype(np.int64)
    y_int = np.round(3 * y).astype(np.int64)
    a = clone(est).fit(X_int, y_int)
    b = clone(est).fit(X_int.astype(np.float64), y_int.astype(np.float64))
    assert_same_outputs(a, b, X_int, X_int.astype(np.float64), rtol=1e-6)


@carried()
def check_estimators_data_not_an_array(est):
    """scikit-learn's check_regressor_data_not_an_array / check_transformer_..."""
    X, y = task()
    reference = fitted(est, X, y)
    for wrap in (lambda a: a.tolist(), NotAnArray, torch.as_tensor):
        other = clone(est).fit(wrap(X), wrap(y))
        assert_same_outputs(reference, other, X, wrap(X), rtol=1e-6)


@carried()
def check_readonly_memmap_input(est):
    X, y = task()
    with tempfile.TemporaryDirectory() as folder:
        read_only = []
        for name, array in (("X", X), ("y", y)):
            np.save(os.path.join(folder, f"{name}.npy"), array)
            read_only.append(np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r"))
        assert_same_outputs(fitted(est, X, y), fitted(est, *read_only), X, read_only[0],
                            rtol=1e-6)


@carried()
def check_f_contiguous_array_estimator(est):
    X, y = task()
    X_f, y_f = np.asfortranarray(X), np.asfortranarray(y)
    assert_same_outputs(fitted(est, X, y), fitted(est, X_f, y_f), X, X_f, rtol=1e-6)


@carried()
def check_estimators_empty_data_messages(est):
    X, y = task()
    with pytest.raises(ValueError, match="X has 0 samples"):
        clone(est).fit(X[:0], y[:0])
    for empty in (X[:, :0], X[..., -1:]):  # no positions; no token channels
        with pytest.raises(ValueError, match="seq_len >= 1 and token_dim >= 1"):
            clone(est).fit(empty, y)


@carried()
def check_estimators_nan_inf(est):
    X, y = task()
    fit = fitted(est, X, y)
    for value in (np.nan, np.inf, -np.inf):
        X_bad = X.copy()
        X_bad[3, 1, 0] = value
        with pytest.raises(ValueError, match="X contains NaN or infinity in 1 sample.*sample 3"):
            clone(est).fit(X_bad, y)
        for name in ("predict", "predict_attention", "transform"):
            if hasattr(fit, name):
                with pytest.raises(ValueError, match="X contains NaN or infinity"):
                    getattr(fit, name)(X_bad)


@carried()
def check_dtype_object(est):
    X, y = task()
    fit = fitted(est, X.astype(object), y.astype(object))
    assert_same_outputs(fit, fitted(est, X, y), X.astype(object), X, rtol=1e-6)
    X_str = X.astype(object)
    X_str[0, 0, 0] = "a"
    with pytest.raises((TypeError, ValueError), match="X must be a numeric array"):
        clone(est).fit(X_str, y)


@carried()
def check_complex_data(est):
    X, y = task()
    with pytest.raises(ValueError, match="X must be a numeric array.*Complex"):
        clone(est).fit(X + 1j, y)


@carried()
def check_pipeline_consistency(est):
    X, y = task()
    pipe = make_pipeline(clone(est)).fit(X, y)
    alone = fitted(est, X, y)
    for name, out in row_outputs(alone, X).items():
        if hasattr(pipe, name):
            assert_allclose(getattr(pipe, name)(X), out, rtol=1e-6, err_msg=name)
    if is_regressor(est):
        assert_allclose(pipe.score(X, y), alone.score(X, y), rtol=1e-6)


@carried()
def check_estimators_pickle(est):
    X, y = task()
    fit = fitted(est, X, y)
    loaded = pickle.loads(pickle.dumps(fit))
    assert_same_outputs(fit, loaded, X, rtol=0, atol=0)
    if is_regressor(est):
        assert loaded.score(X, y) == fit.score(X, y)


@carried(only="regressor")
def check_regressors_train(est):
    X, y = task(n_samples=96)
    with pytest.raises(ValueError, match="y must have shape"):
        clone(est).fit(X, y[:-1])
    if "max_epochs" in est.get_params():
        # 10 epochs learn this tiny task past the untrained model (uniform
        # attention scores q/T = 0.4, a random FCN about 0) for any data seed:
        # the transformer at 2 epochs scores 0.39-0.49 over seeds 0-5.
        est.set_params(max_epochs=10)
    est.fit(X.tolist(), y.tolist())
    assert est.predict(X).shape == y.shape
    assert est.score(X, y) > 0.5


@carried(only="regressor")
def check_regressor_multioutput(est):
    X, y = task(token_dim=3)
    y_pred = est.fit(X, y).predict(X)
    assert y_pred.shape == y.shape
    assert y_pred.dtype == np.float64, y_pred.dtype


@carried(only="regressor")
def check_regressors_no_decision_function(est):
    est.fit(*task())
    # skorch's predict_proba stays (the module's raw output, as on NeuralNetRegressor)
    for name in ("decision_function", "predict_log_proba"):
        assert not hasattr(est, name), name


@carried(only="regressor")
def check_supervised_y_no_nan(est):
    X, y = task()
    for value in (np.nan, np.inf):
        y_bad = y.copy()
        y_bad[5, 1] = value
        with pytest.raises(ValueError, match="y contains NaN or infinity.*sample 5"):
            clone(est).fit(X, y_bad)


@carried(only="regressor")
def check_supervised_y_2d(est):
    # Multi-output only: a 1-D y is refused with the reshape that fixes it.
    X, y = task(token_dim=1)
    with pytest.raises(ValueError, match=r"y.reshape\(-1, 1\)"):
        clone(est).fit(X, y.ravel())


@carried(only="regressor")
def check_requires_y_none(est):
    with pytest.raises(ValueError, match="y is required"):
        est.fit(task()[0], None)


@carried(only="regressor")
def check_estimators_partial_fit_n_features(est):
    X, y = task(token_dim=2)
    est.partial_fit(X, y)
    X_bad, y_bad = task(token_dim=3)
    with pytest.raises(ValueError, match="fitted with token_dim 2"):
        est.partial_fit(X_bad, y_bad)


@carried()
def check_methods_sample_order_invariance(est):
    X, y = task()
    est.fit(X, y)
    order = np.random.default_rng(0).permutation(len(X))
    for name, out in row_outputs(est, X).items():
        assert_allclose(getattr(est, name)(X[order]), out[order], atol=1e-6, err_msg=name)
    if is_regressor(est):
        assert_allclose(est.score(X[order], y[order]), est.score(X, y), rtol=1e-5)


@carried()
def check_methods_subset_invariance(est):
    X, y = task()
    est.fit(X, y)
    full = row_outputs(est, X)
    chunks = [row_outputs(est, X[i:i + 7]) for i in range(0, len(X), 7)]
    singles = [row_outputs(est, X[i:i + 1]) for i in range(len(X))]
    for name, out in full.items():
        assert_allclose(np.concatenate([c[name] for c in chunks]), out, atol=1e-6, err_msg=name)
        assert_allclose(np.concatenate([s[name] for s in singles]), out, atol=1e-6, err_msg=name)
    if "batch_size" in est.get_params():
        est.set_params(batch_size=5)  # prediction batches of another size
        for name, out in row_outputs(est, X).items():
            assert_allclose(out, full[name], atol=1e-6, err_msg=name)


@carried()
def check_fit2d_1sample(est):
    X, y = task()
    est.fit(X[:1], y[:1])
    assert all(len(out) == 1 for out in row_outputs(est, X[:1]).values())


@carried()
def check_fit2d_1feature(est):
    # The smallest task: token_dim = 1 and seq_len = 1 (the last axis is 2).
    X, y = task(seq_len=1, token_dim=1)
    est.fit(X, y)
    out = row_outputs(est, X)
    if is_regressor(est):
        assert out["predict"].shape == (len(X), 1)


@carried()
def check_fit_idempotent(est):
    X, y = task()
    est.fit(X, y)
    first = row_outputs(est, X)
    est.fit(*task(seed=1))
    est.fit(X, y)
    for name, out in row_outputs(est, X).items():
        assert_allclose(out, first[name], rtol=1e-6, atol=1e-7, err_msg=name)


@carried(only="regressor")
def check_same_seed_same_model(est):
    # Not one of scikit-learn's: two clones with one random_state are one model.
    X, y = task()
    a, b = fitted(est, X, y), fitted(est, X, y)
    for (name, wa), wb in zip(a.module_.state_dict().items(), b.module_.state_dict().values()):
        assert torch.equal(wa, wb), name


@carried()
def check_fitted_clone_is_unfitted(est):
    fit = fitted(est)
    fresh = clone(fit)
    assert joblib.hash(fresh.get_params()) == joblib.hash(fit.get_params())
    with pytest.raises(NotFittedError):
        check_is_fitted(fresh)


@carried()
def check_fit1d(est):
    X, y = task()
    with pytest.raises(ValueError, match="X must be a 3-D array"):
        clone(est).fit(X[:, 0, 0], y)


@carried()
def check_fit2d_predict1d(est):
    X, y = task()
    est.fit(X, y)
    for name in ("predict", "predict_attention", "transform"):
        if hasattr(est, name):
            for X_bad in (X[0], X[0, 0]):
                with pytest.raises(ValueError, match=r"X\[np.newaxis\]"):
                    getattr(est, name)(X_bad)


@carried(only="regressor")
def check_no_attributes_set_in_init_beyond_skorch(est):
    # The narrow form of the expected failure above: what __init__ sets beyond
    # skorch's NeuralNet.__init__ is constructor parameters (or routed ones).
    skorch_attrs = set(vars(NeuralNetRegressor(torch.nn.Linear)))
    ours = {k for k in set(vars(est)) - skorch_attrs if "__" not in k}
    assert ours <= set(inspect.signature(type(est)).parameters), ours
    fitted_attrs = {k for k in vars(est) if k.endswith("_")}
    assert fitted_attrs == {"history_", "initialized_", "virtual_params_"}


@carried(only="transformer")
def check_transformer_general(est):
    X, y = task()
    Xt = clone(est).fit_transform(X, y)
    assert_allclose(Xt, clone(est).fit(X, y).transform(X))
    assert Xt.shape == (len(X), X.shape[1] * X.shape[2])
    with pytest.raises(ValueError, match="seq_len"):
        est.fit(X).transform(task(seq_len=6)[0])


@carried(only="transformer")
def check_transformer_preserve_dtypes(est):
    X, _ = task()
    for dtype in sk.get_tags(est).transformer_tags.preserves_dtype:
        assert est.fit(X.astype(dtype)).transform(X.astype(dtype)).dtype == dtype


@carried(only="transformer")
def check_transformer_get_feature_names_out(est):
    X, _ = task()
    names = est.fit(X).get_feature_names_out()
    assert len(names) == est.transform(X).shape[1] == len(set(names))


# -- the parametrisation -------------------------------------------------------


def kind(est_id):
    return "transformer" if est_id == "flatten" else "regressor"


def cases():
    for est_id in ESTIMATORS:
        names = SKLEARN_OWN["all"] + SKLEARN_OWN[kind(est_id)]
        for name in names:
            yield est_id, "sklearn", name
        for name, (_, only) in CARRIED.items():
            if only in (None, kind(est_id)):
                yield est_id, "carried", name


def params():
    for est_id, source, name in cases():
        reason = EXPECTED_FAILURES.get(name) if est_id in SKORCH else None
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(est_id, source, name, marks=marks, id=f"{est_id}-{source}-{name}")


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("est_id, source, check_name", list(params()))
def test_estimator_check(est_id, source, check_name):
    torch.set_num_threads(1)
    est = ESTIMATORS[est_id]()
    if source == "sklearn":
        getattr(sk, check_name)(type(est).__name__, est)
    else:
        CARRIED[check_name][0](est)


def test_sklearn_suite_skips_3d_estimators():
    # Why the checks are carried: scikit-learn runs only the clone check on
    # 3-D estimators and skips the rest with a warning. If this fails,
    # scikit-learn learned to feed 3-D data and could run its suite directly.
    for est_id, make in ESTIMATORS.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = sk.check_estimator(make(), on_fail=None)
        assert [r["check_name"] for r in results] == ["check_estimator_cloneable"], est_id
        assert any(issubclass(w.category, SkipTestWarning) for w in caught), est_id


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("check_name", ["check_no_attributes_set_in_init", "check_set_params"])
def test_expected_failures_come_from_skorch(check_name):
    bare = NeuralNetRegressor(torch.nn.Linear, module__in_features=2, module__out_features=1)
    with pytest.raises((AssertionError, AttributeError)):
        getattr(sk, check_name)("NeuralNetRegressor", bare)


def test_predict_is_float64_where_skorch_gives_float32():
    # Why predict casts: skorch's regressor returns the module's dtype, and
    # scikit-learn's check_regressor_multioutput wants float64.
    X = np.random.default_rng(0).normal(size=(8, 2)).astype(np.float32)
    bare = NeuralNetRegressor(torch.nn.Linear, module__in_features=2, module__out_features=3,
                              max_epochs=1, train_split=None, verbose=0)
    assert bare.fit(X, X @ np.ones((2, 3), np.float32)).predict(X).dtype == np.float32
    X, y = task()
    est = ESTIMATORS["fcn"]().fit(X, y)
    assert est.predict(X).dtype == np.float64
    assert next(est.module_.parameters()).dtype == torch.float32  # the module stays float32


def test_every_expected_failure_is_used():
    names = {name for _, _, name in cases()}
    assert set(EXPECTED_FAILURES) <= names
