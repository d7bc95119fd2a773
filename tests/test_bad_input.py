"""Bad input against every public entry point.

Each (entry point, bad input) pair must raise ValueError or TypeError whose
message names the argument and says what to do, before any training starts:
a spy callback sees no epoch, and a fitted estimator keeps its weights,
history and sizes.
"""

import re

import numpy as np
import pytest
import scipy.sparse
import torch
from sklearn.exceptions import NotFittedError
from skorch.callbacks import Callback, EarlyStopping

from sparse_token_estimators import (
    FlattenTokens,
    SparseTokenFCN,
    SparseTokenTransformer,
    make_sparse_selection,
)

N, T, D = 12, 5, 2
X_OK, Y_OK = make_sparse_selection(N, T, D, n_selected=2, random_state=0)
LAYOUT = re.escape("(n_samples, seq_len, token_dim + 1)")
#: a position of X_OK whose indicator is 0.0
UNSELECTED = (0, int(np.flatnonzero(X_OK[0, :, -1] == 0)[0]), -1)


class Spy(Callback):
    """Records every training event skorch sends."""

    def initialize(self):
        self.events = []
        return self

    def on_train_begin(self, net, **kwargs):
        self.events.append("train_begin")

    def on_epoch_begin(self, net, **kwargs):
        self.events.append("epoch_begin")

    def on_batch_begin(self, net, **kwargs):
        self.events.append("batch_begin")


def with_x(edit):
    return lambda: (edit(X_OK.copy()), Y_OK)


def set_at(value, where=(2, 1, 0), dtype=None):
    def edit(X):
        X = X.astype(dtype) if dtype else X
        X[where] = value
        return X
    return edit


def other_len(seq_len):
    return make_sparse_selection(N, seq_len, D, n_selected=2, random_state=1)


# name -> (make (X, y), pattern: the argument and the fix, which entry points)
X_ALL, Y_ROLE, FITTED = "X", "y", "fitted"
BAD = {
    "X-nan": (with_x(set_at(np.nan)), r"X contains NaN or infinity.*drop or repair", X_ALL),
    "X-inf": (with_x(set_at(np.inf)), r"X contains NaN or infinity.*drop or repair", X_ALL),
    "X--inf": (with_x(set_at(-np.inf)), r"X contains NaN or infinity.*drop or repair", X_ALL),
    "X-beyond-float32": (with_x(set_at(1e39, dtype=np.float64)),
                         r"X contains NaN or infinity.*float32 range", X_ALL),
    "X-none": (lambda: (None, Y_OK), rf"X is required: an array of shape {LAYOUT}", X_ALL),
    "X-scalar": (lambda: (1.0, Y_OK), r"X must be a 3-D array.*X\[np.newaxis\]", X_ALL),
    "X-1d": (lambda: (X_OK[0, 0], Y_OK), r"X must be a 3-D array.*X\[np.newaxis\]", X_ALL),
    "X-2d": (lambda: (X_OK[0], Y_OK), r"X must be a 3-D array.*X\[np.newaxis\]", X_ALL),
    "X-4d": (lambda: (X_OK[None], Y_OK), rf"X must be a 3-D array of shape {LAYOUT}", X_ALL),
    "X-empty": (lambda: (X_OK[:0], Y_OK[:0]), r"X has 0 samples.*pass at least one", X_ALL),
    "X-no-positions": (lambda: (X_OK[:, :0], Y_OK), r"seq_len >= 1.*last axis holds", X_ALL),
    "X-no-token-channel": (lambda: (X_OK[..., -1:], Y_OK), r"token_dim >= 1.*last axis holds",
                           X_ALL),
    "X-strings": (lambda: (X_OK.astype(str), Y_OK),
                  rf"X must be a numeric array of shape {LAYOUT}.*numeric", X_ALL),
    "X-object-with-string": (with_x(set_at("a", dtype=object)),
                             rf"X must be a numeric array of shape {LAYOUT}", X_ALL),
    "X-object-with-numeric-string": (with_x(set_at("1.5", dtype=object)),
                                     rf"X must be a numeric array of shape {LAYOUT}.*'1.5' "
                                     r"of type str.*Convert it to numbers", X_ALL),
    "X-object-with-None": (with_x(set_at(None, dtype=object)),
                           r"X contains NaN.*drop or repair", X_ALL),
    "X-object-with-dict": (with_x(set_at({}, dtype=object)),
                           rf"X must be a numeric array of shape {LAYOUT}", X_ALL),
    "X-complex": (lambda: (X_OK + 0j, Y_OK), r"X must be a numeric array.*Complex", X_ALL),
    "X-sparse": (lambda: (scipy.sparse.csr_matrix(X_OK[:, :, 0]), Y_OK),
                 r"X must be a numeric array.*toarray", X_ALL),
    "X-ragged-list": (lambda: ([X_OK[0], X_OK[1, :3]], Y_OK[:2]),
                      rf"X must be a numeric array of shape {LAYOUT}", X_ALL),
    "X-indicator-half": (with_x(set_at(0.5, (0, 0, -1))),
                         r"indicator.*only 0.0 and 1.0.*Append the indicator", X_ALL),
    "X-indicator-float64-above-one": (with_x(set_at(1 + 1e-9, (0, 0, -1), dtype=np.float64)),
                                      r"indicator.*only 0.0 and 1.0; found \[1.000000001\]",
                                      X_ALL),
    "X-indicator-float64-tiny": (with_x(set_at(1e-50, UNSELECTED, dtype=np.float64)),
                                 r"indicator.*only 0.0 and 1.0; found \[1e-50\]", X_ALL),
    "X-flattened-2d": (lambda: (X_OK.reshape(N, -1), Y_OK),
                       r"got an array of shape \(12, 15\)\. A flattened array of shape "
                       r"\(n_samples, seq_len \* \(token_dim \+ 1\)\).*needs X\.reshape\(",
                       X_ALL),
    "X-indicator-two": (with_x(set_at(2.0, (0, 0, -1))),
                        r"indicator.*only 0.0 and 1.0.*Append the indicator", X_ALL),
    "X-indicator-negative": (with_x(set_at(-1.0, (0, 0, -1))),
                             r"indicator.*only 0.0 and 1.0.*Append the indicator", X_ALL),
    "X-no-selected-token": (with_x(set_at(0.0, (4, slice(None), -1))),
                            r"1 sample\(s\) of X select no token \(e.g. sample 4\).*Set the "
                            r"indicator", X_ALL),
    "X-other-token_dim": (lambda: make_sparse_selection(N, T, D + 1, 2, random_state=1),
                          r"X has token_dim 3.*fitted with token_dim 2.*Pass tokens of the "
                          r"dimension seen in fit", FITTED),
    "y-none": (lambda: (X_OK, None), r"y is required: an array of shape \(n_samples, token_dim\)",
               Y_ROLE),
    "y-too-short": (lambda: (X_OK, Y_OK[:-1]), r"y must have shape \(n_samples, token_dim\) = "
                    r"\(12, 2\).*got \(11, 2\)", Y_ROLE),
    "y-too-long": (lambda: (X_OK, np.vstack([Y_OK, Y_OK])), r"y must have shape .* = \(12, 2\)",
                   Y_ROLE),
    "y-1d": (lambda: (X_OK, Y_OK[:, 0]), r"y must have shape .* = \(12, 2\).*got \(12,\)", Y_ROLE),
    "y-3d": (lambda: (X_OK, Y_OK[..., None]), r"y must have shape .* = \(12, 2\)", Y_ROLE),
    "y-other-token_dim": (lambda: (X_OK, np.hstack([Y_OK, Y_OK])),
                          r"y must have shape .* = \(12, 2\).*got \(12, 4\)", Y_ROLE),
    "y-empty": (lambda: (X_OK, Y_OK[:0]), r"y must have shape .* = \(12, 2\)", Y_ROLE),
    "y-nan": (lambda: (X_OK, np.where(np.arange(N)[:, None] == 3, np.nan, Y_OK)),
              r"y contains NaN or infinity in 1 sample\(s\) \(e.g. sample 3.*drop or repair",
              Y_ROLE),
    "y-inf": (lambda: (X_OK, np.full_like(Y_OK, np.inf)), r"y contains NaN or infinity.*drop",
              Y_ROLE),
    "y-strings": (lambda: (X_OK, Y_OK.astype(str)),
                  r"y must be a numeric array of shape \(n_samples, token_dim\)", Y_ROLE),
}

# Unsupported lengths: (entry points, make (X, y), pattern)
SEQ_LEN = {
    "fcn-other-seq_len": (
        ["fcn.predict", "fcn.score", "fcn.partial_fit"], lambda: other_len(T + 2),
        r"X has seq_len 7, but this SparseTokenFCN was fitted on seq_len 5.*Use "
        r"SparseTokenTransformer"),
    "fixed-beyond-max_seq_len": (
        ["fixed.fit", "fixed.predict", "fixed.score", "fixed.predict_attention",
         "fixed.partial_fit"], lambda: other_len(20),
        r"X has seq_len 20 but the fixed positional encoding has only max_seq_len=16.*Refit "
        r"with max_seq_len >= 20, or use positional_encoding='stochastic'"),
    "flatten-other-seq_len": (
        ["flatten.transform"], lambda: other_len(T + 2),
        r"X has seq_len 7 but FlattenTokens was fitted on seq_len 5.*use SparseTokenTransformer"),
}

MAKERS = {
    "stochastic": lambda: SparseTokenTransformer(pe_dim=8, max_epochs=1, batch_size=8,
                                                 random_state=0),
    "fixed": lambda: SparseTokenTransformer(pe_dim=8, positional_encoding="fixed",
                                            max_seq_len=16, max_epochs=1, batch_size=8,
                                            random_state=0),
    "fcn": lambda: SparseTokenFCN(hidden_width=8, max_epochs=1, batch_size=8, random_state=0),
}
METHODS = ["fit", "partial_fit", "predict", "score", "predict_attention"]
ENTRY_POINTS = [f"{est}.{m}" for est in MAKERS for m in METHODS
                if m != "predict_attention" or est != "fcn"]
ENTRY_POINTS += ["flatten.fit", "flatten.transform"]


def applies(role, entry):
    method = entry.split(".")[1]
    if role == Y_ROLE:
        return method in ("fit", "partial_fit", "score") and not entry.startswith("flatten")
    if role == FITTED:  # refitting with another token_dim is legal
        return method != "fit"
    return True


def cases():
    for entry in ENTRY_POINTS:
        for name, (make, pattern, role) in BAD.items():
            if applies(role, entry):
                yield pytest.param(entry, make, pattern, id=f"{entry}-{name}")
    for name, (entries, make, pattern) in SEQ_LEN.items():
        for entry in entries:
            yield pytest.param(entry, make, pattern, id=f"{entry}-{name}")


@pytest.fixture(scope="module")
def fitted():
    torch.set_num_threads(1)
    ests = {name: make().set_params(callbacks=[("spy", Spy())]).fit(X_OK, Y_OK)
            for name, make in MAKERS.items()}
    ests["flatten"] = FlattenTokens().fit(X_OK)
    return ests


def snapshot(est):
    """Everything a failed call must leave alone."""
    state = {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}
    if hasattr(est, "module_"):
        state["weights"] = {k: v.clone() for k, v in est.module_.state_dict().items()}
        state["history_len"] = len(est.history)
        state["events"] = list(dict(est.callbacks_)["spy"].events)
        state["module_id"] = id(est.module_)
    return state


def assert_unchanged(before, after):
    assert before.keys() == after.keys()
    for key, value in before.items():
        if key == "weights":
            assert all(torch.equal(value[k], after[key][k]) for k in value)
        elif key in ("history_", "callbacks_", "module_", "optimizer_", "criterion_",
                     "torch_rng_", "virtual_params_"):
            continue  # compared through weights / history_len / events / module_id
        else:
            assert value == after[key], key


@pytest.mark.parametrize("entry, make, pattern", list(cases()))
def test_bad_input_is_refused_before_training(entry, make, pattern, fitted):
    est_name, method = entry.split(".")
    X, y = make()
    est = fitted[est_name]
    before = snapshot(est)
    args = (X,) if method in ("predict", "predict_attention", "transform") else (X, y)
    with pytest.raises((ValueError, TypeError)) as info:
        getattr(est, method)(*args)
    assert re.search(pattern, str(info.value), flags=re.S), str(info.value)
    assert_unchanged(before, snapshot(est))


@pytest.mark.parametrize("est_name", list(MAKERS))
@pytest.mark.parametrize("kind", ["X-nan", "X-2d", "X-no-selected-token", "y-too-short"])
def test_unfitted_estimator_stays_unfitted(est_name, kind):
    # On a fresh estimator nothing is built either: no module, no epoch.
    spy = Spy()
    est = MAKERS[est_name]().set_params(callbacks=[("spy", spy)])
    X, y = BAD[kind][0]()
    with pytest.raises(ValueError):
        est.fit(X, y)
    assert not hasattr(est, "module_") and not est.initialized_
    assert not hasattr(spy, "events") or spy.events == []


# Every constructor parameter, the package's and skorch's: bad values (each
# row of the table in issue 16 and its neighbours: negative, zero, float,
# string, None where None is not allowed, a wrong type).
BAD_PARAMS = {
    "batch_size": [-5, -2, 0, 32.5, "32", None, True],
    "max_epochs": [-1, 0, 2.5, "10", None, True],
    "optimizer": ["adam", None, 1],
    "criterion": ["mse", None, 1],
    "callbacks": ["x", 1, [1], ["EarlyStopping"], [("stop",)], EarlyStopping()],
    "train_split": [0.2, 5, "valid"],
    "iterator_train": ["TensorBatches", None, 1],
    "iterator_valid": ["TensorBatches", None, 1],
    "iterator_train__shuffle": ["yes", None],
    "dataset": ["Dataset", None],
    "warm_start": ["yes", 1, None],
    "verbose": ["loud", -1, 1.5, None],
    "predict_nonlinearity": ["sigmoid", 1],
    "compile": ["yes", 1, None],
    "use_caching": ["yes", None],
    "torch_load_kwargs": ["weights_only", 1],
    "random_state": ["a", -1, 1.5, 2**32],
    "device": ["tpu", "gpu", 1, "meta"],
    "lr": [float("nan"), float("inf"), -0.1, "fast", None, True],
    "token_dim": [0, -1, 2.5, "2", True],
    "layout": ["rows", "Query", None, 1],
    "n_selected": [0, -1, 2.5, "2", True],
    "module": ["SparseTokenAttention", None],
}
OWN_BAD_PARAMS = {
    "stochastic": {"pe_dim": [0, -1, 2.5, "64", None, True],
                   "n_pe_draws": [0, -1, 1.5, None],
                   "max_seq_len": [0, 2.5, None],
                   "positional_encoding": ["rope", None, 1],
                   "output_map": ["yes", None, 1]},
    "fcn": {"seq_len": [0, -1, 2.5, "5", True],
            "hidden_width": [0, -1, 2.5, "8", None],
            "n_hidden_layers": [0, -1, 1.5, None]},
}
# The fix each message must carry (beyond scikit-learn's "must be ..., got ...").
FIXES = {
    ("batch_size", -5): r"-1 takes all of them as one batch",
    ("max_epochs", 0): r"0 would return a model that never trained",
    ("optimizer", "adam"): r"optimizer=torch\.optim\.Adam, not a string",
    ("criterion", "mse"): r"criterion=torch\.nn\.MSELoss, not a string",
    ("callbacks", "x"): r"callbacks=\[EarlyStopping\(monitor='train_loss'\)\]",
    ("train_split", 0.2): r"train_split=skorch\.dataset\.ValidSplit\(0\.2\)",
    ("warm_start", "yes"): r"Pass True .* or False",
    ("verbose", "loud"): r"Pass 0 \(silent, the default\) or 1",
    ("device", "tpu"): r"Pass 'auto' .*'cpu', 'cuda' or 'cuda:N'",
    ("token_dim", 0): r"None learns it from X at fit",
}
NAMES = {"stochastic": "SparseTokenTransformer", "fcn": "SparseTokenFCN"}


def param_cases():
    for est_name in NAMES:
        for param, values in {**BAD_PARAMS, **OWN_BAD_PARAMS[est_name]}.items():
            for value in values:
                yield pytest.param(est_name, param, value, id=f"{est_name}-{param}={value!r}")


def assert_names_the_parameter(exc, est_name, param, value):
    # scikit-learn's InvalidParameterError: both a ValueError and a TypeError
    assert isinstance(exc, ValueError) and isinstance(exc, TypeError)
    message = str(exc)
    pattern = (rf"^The '{param}' parameter of {NAMES[est_name]} must be .+\. "
               rf"Got {re.escape(repr(value))} instead\. \S")  # ... and a hint follows
    assert re.search(pattern, message, flags=re.S), message
    fix = FIXES.get((param, value)) if isinstance(value, (str, int, float)) else None
    assert fix is None or re.search(fix, message), message


@pytest.mark.parametrize("est_name, param, value", list(param_cases()))
def test_bad_parameters_are_refused_before_anything_is_built(est_name, param, value):
    for method in ("fit", "partial_fit", "initialize"):
        spy = Spy()
        est = MAKERS[est_name]().set_params(callbacks=[("spy", spy)], token_dim=D)
        est.set_params(**{param: value})
        with pytest.raises((ValueError, TypeError)) as info:
            getattr(est, method)(*(() if method == "initialize" else (X_OK, Y_OK)))
        assert_names_the_parameter(info.value, est_name, param, value)
        assert not hasattr(est, "module_") and not est.initialized_
        assert not hasattr(spy, "events") or spy.events == []


@pytest.mark.parametrize("est_name, param, value", list(param_cases()))
def test_bad_parameters_leave_a_fitted_estimator_as_it_was(est_name, param, value, fitted):
    est = fitted[est_name]
    before = snapshot(est)
    good = est.get_params(deep=False)[param]
    est.set_params(**{param: value})
    try:
        for method in ("fit", "partial_fit", "initialize"):
            with pytest.raises((ValueError, TypeError)) as info:
                getattr(est, method)(*(() if method == "initialize" else (X_OK, Y_OK)))
            assert_names_the_parameter(info.value, est_name, param, value)
            assert_unchanged(before, snapshot(est))
    finally:
        est.set_params(**{param: good})
    assert_unchanged(before, snapshot(est))


def test_every_parameter_has_bad_values_in_the_matrix():
    for est_name, make in MAKERS.items():
        if est_name in NAMES:
            covered = set(BAD_PARAMS) | set(OWN_BAD_PARAMS[est_name])
            assert set(make().get_params(deep=False)) - {"_params_to_validate"} == covered


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("est_name", list(NAMES))
def test_absent_gpu_is_refused_before_anything_is_built(est_name):
    est = MAKERS[est_name]().set_params(device="cuda")
    with pytest.raises(ValueError, match="no CUDA GPU is available; use device='auto'"):
        est.fit(X_OK, Y_OK)
    assert not hasattr(est, "module_")


@pytest.mark.parametrize("est_name", list(NAMES))
def test_parameters_that_predict_reads_are_checked_by_predict(est_name, fitted):
    est = fitted[est_name]
    before = est.predict(X_OK)
    for param, value in [("batch_size", 0), ("iterator_valid", None), ("device", "tpu")]:
        good = est.get_params()[param]
        est.set_params(**{param: value})
        try:
            for method in ("predict", "score"):
                with pytest.raises(ValueError) as info:
                    getattr(est, method)(*((X_OK,) if method == "predict" else (X_OK, Y_OK)))
                assert_names_the_parameter(info.value, est_name, param, value)
        finally:
            est.set_params(**{param: good})
    np.testing.assert_array_equal(est.predict(X_OK), before)


@pytest.mark.parametrize("est_name", list(NAMES))
def test_routed_arguments_reach_their_component_and_typos_are_refused(est_name):
    # skorch's check of prefix__name arguments runs before anything is built,
    # and knows the components a fresh estimator has not built yet.
    est = MAKERS[est_name]().set_params(optimizer__weight_decay=0.1,
                                        criterion__reduction="sum", module__token_dim=D)
    est.fit(X_OK, Y_OK)
    assert est.optimizer_.param_groups[0]["weight_decay"] == 0.1
    assert est.criterion_.reduction == "sum"
    Estimator = type(est)
    for typo, pattern in [("optimizer_weight_decay", "did you mean optimizer__weight_decay"),
                          ("hidden_widht", r"unexpected argument\(s\) hidden_widht")]:
        est = Estimator(**{typo: 1})
        with pytest.raises(ValueError, match=pattern):
            est.fit(X_OK, Y_OK)
        assert not hasattr(est, "module_")


def test_parameter_validation_is_scikit_learns():
    # The private pieces of scikit-learn the rules rely on: pinned, so that a
    # change in scikit-learn shows up here rather than as a silent gap.
    from sklearn.utils._param_validation import (
        Interval,
        InvalidParameterError,
        Options,
        StrOptions,
        validate_parameter_constraints,
    )

    from sparse_token_estimators import _params

    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)
    assert issubclass(_params.Count, Interval) and issubclass(_params.Device, Options)
    assert SparseTokenTransformer._parameter_constraints is _params.TRANSFORMER
    assert SparseTokenFCN._parameter_constraints is _params.FCN
    with pytest.raises(InvalidParameterError, match="The 'x' parameter of f must be"):
        validate_parameter_constraints({"x": [StrOptions({"a"})]}, {"x": "b"}, "f")
    # bools are ints to Python, never sizes or rates here
    for constraint in (_params.Count(1), _params.NonNegative()):
        assert not constraint.is_satisfied_by(True)


# -- no fit returns without having trained ----------------------------------------


def no_batches(dataset, **kwargs):
    return []


class OneEpochOnly:
    """An iterator_train whose batches run out after the first epoch."""

    def __init__(self, dataset, **kwargs):
        self.batches = iter([[dataset[:][0], dataset[:][1]]])

    def __iter__(self):
        return self.batches


def empty_training_split(dataset, y=None, **kwargs):
    return torch.utils.data.Subset(dataset, []), dataset


EMPTY_EPOCH = {
    "drop_last": (dict(batch_size=32, iterator_train__drop_last=True),
                  r"Epoch 1 took no optimisation step: iterator_train yielded no batch: "
                  r"from 12 training sequences in batches of batch_size=32 with "
                  r"drop_last=True.*Lower batch_size to at most 12, or set "
                  r"iterator_train__drop_last=False"),
    "empty-iterator": (dict(iterator_train=no_batches),
                       r"Epoch 1 took no optimisation step.*Check iterator_train"),
    "empty-train-split": (dict(train_split=empty_training_split),
                          r"Epoch 1 took no optimisation step.*the training data is empty "
                          r"\(check train_split\)"),
}


@pytest.mark.parametrize("est_name", list(MAKERS))
@pytest.mark.parametrize("case", list(EMPTY_EPOCH))
def test_a_fit_that_takes_no_step_is_an_error_not_a_model(est_name, case):
    params, pattern = EMPTY_EPOCH[case]
    for method in ("fit", "partial_fit"):
        est = MAKERS[est_name]().set_params(**params)
        with pytest.raises(ValueError, match=pattern + r".*reset to unfitted"):
            getattr(est, method)(X_OK, Y_OK)
        assert not est.initialized_ and not hasattr(est, "module_")
        with pytest.raises(NotFittedError):
            est.predict(X_OK)
        assert est.history_ is None  # as before the call: the empty epoch is not recorded


@pytest.mark.parametrize("est_name", list(MAKERS))
def test_continuing_with_an_empty_epoch_keeps_the_model(est_name, fitted):
    est = fitted[est_name]
    before = snapshot(est)
    est.set_params(iterator_train__drop_last=True, batch_size=32)
    try:
        with pytest.raises(ValueError, match="took no optimisation step.*keeps its model"):
            est.partial_fit(X_OK, Y_OK)
    finally:
        est.set_params(iterator_train__drop_last=False, batch_size=8)
    after = snapshot(est)
    before.pop("events"), after.pop("events")  # the spy saw the empty epoch begin
    assert_unchanged(before, after)


def test_batches_running_out_mid_fit_is_an_error_after_what_trained():
    est = MAKERS["fcn"]().set_params(iterator_train=OneEpochOnly, max_epochs=3)
    with pytest.raises(ValueError, match="Epoch 2 took no optimisation step.*keeps its model"):
        est.fit(X_OK, Y_OK)
    assert len(est.history_) == 1 and est.history_[-1, "train_batch_count"] == 1
    assert est.predict(X_OK).shape == Y_OK.shape  # the epoch that trained is kept


def test_batch_size_minus_one_trains_on_everything_at_once():
    for name in ("stochastic", "fcn"):
        est = MAKERS[name]().set_params(batch_size=-1, max_epochs=2).fit(X_OK, Y_OK)
        assert est.history_[:, "train_batch_count"] == [1, 1]
        assert est.history_[-1, "batches", 0, "train_batch_size"] == N


GENERATOR = [
    (dict(n_samples=0), ValueError, "n_samples must be an integer >= 1; got 0"),
    (dict(n_samples=-3), ValueError, "n_samples must be an integer >= 1; got -3"),
    (dict(n_samples=2.5), TypeError, "n_samples must be an integer >= 1; got 2.5 of type float"),
    (dict(n_samples="10"), TypeError, "n_samples must be an integer"),
    (dict(n_samples=None), TypeError, "n_samples must be an integer"),
    (dict(n_samples=np.nan), TypeError, "n_samples must be an integer"),
    (dict(seq_len=0), ValueError, "seq_len must be an integer >= 1"),
    (dict(seq_len=True), TypeError, "seq_len must be an integer"),
    (dict(token_dim=0), ValueError, "token_dim must be an integer >= 1"),
    (dict(token_dim=[2]), TypeError, "token_dim must be an integer"),
    (dict(n_selected=0), ValueError, "n_selected must be an integer >= 1"),
    (dict(n_selected=6), ValueError,
     "n_selected must be between 1 and seq_len=5; got 6. Select fewer tokens or use longer"),
    (dict(random_state="seed"), TypeError, "random_state must be None, an int, a numpy"),
    (dict(random_state=1.5), TypeError, "random_state must be None, an int, a numpy"),
    (dict(random_state=-1), ValueError,
     "random_state must be a non-negative int (a seed); got -1. Use a seed >= 0"),
    (dict(random_state=np.int64(-3)), ValueError, "random_state must be a non-negative int"),
    (dict(return_support="no"), TypeError,
     "return_support must be True or False; got 'no' of type str"),
    (dict(return_support=1), TypeError, "return_support must be True or False; got 1"),
]


@pytest.mark.parametrize("bad, error, pattern", GENERATOR,
                         ids=[f"{k}={v!r}" for (b, _, _) in GENERATOR for k, v in b.items()])
def test_generator_refuses_bad_arguments(bad, error, pattern):
    args = dict(n_samples=4, seq_len=5, token_dim=2, n_selected=2, random_state=0)
    with pytest.raises(error, match=re.escape(pattern)):
        make_sparse_selection(**{**args, **bad})


def test_large_finite_values_are_accepted_even_if_their_sum_overflows():
    # The finiteness check sums the array first; a sum that overflows float32
    # must fall back to the per-value check, not refuse finite data.
    from sparse_token_estimators._layout import check_target, check_tokens

    X, y = X_OK.copy(), Y_OK.copy()
    X[..., :-1] = 3e38
    y[:] = 3e38
    with np.errstate(over="ignore"):
        assert not np.isfinite(X.sum()) and not np.isfinite(y.sum())
    np.testing.assert_array_equal(check_tokens(X), X)
    np.testing.assert_array_equal(check_target(y, X), y)
    X[3, 1, 0] = np.nan
    with pytest.raises(ValueError,
                       match=r"X contains NaN or infinity in 1 sample\(s\) \(e.g. sample 3"):
        check_tokens(X)


def test_stream_refuses_a_negative_seed_at_construction():
    from sparse_token_estimators import SparseSelectionStream

    with pytest.raises(ValueError, match=re.escape(
            "random_state must be a non-negative int (a seed); got -1")):
        SparseSelectionStream(T, D, 2, n_samples=N, random_state=-1)


def test_flattened_input_gets_the_exact_reshape_once_token_dim_is_known(fitted):
    flat = X_OK.reshape(N, -1)
    with pytest.raises(ValueError, match=re.escape("needs X.reshape(12, 5, 3) (see the data "
                                                   "layout page")):
        fitted["stochastic"].predict(flat)
    np.testing.assert_array_equal(fitted["stochastic"].predict(flat.reshape(12, 5, 3)),
                                  fitted["stochastic"].predict(X_OK))


def test_a_flattened_dataframe_is_told_to_reshape_its_values(fitted):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X_OK.reshape(N, -1))
    with pytest.raises(ValueError, match=r"A flattened pandas DataFrame of shape .*needs "
                                         r"X\.to_numpy\(\)\.reshape\(12, 5, 3\)") as info:
        fitted["stochastic"].predict(frame)
    assert "np.newaxis" not in str(info.value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tensors_of_float_types_numpy_lacks_are_widened_exactly(dtype, fitted):
    # every bfloat16 (and float16) value is a float32: the cast loses nothing
    X = torch.as_tensor(X_OK).to(dtype)
    est = fitted["stochastic"]
    np.testing.assert_array_equal(est.predict(X), est.predict(X.float()))


def test_values_beyond_float32_are_refused_with_the_limit_named():
    from sparse_token_estimators._layout import check_tokens

    X = X_OK.astype(np.float64)
    X[1, 0, 0] = -1e39
    with pytest.raises(ValueError, match=r"sample 1; values beyond the float32 range, about "
                                         r"3.4e38, count as infinite"):
        check_tokens(X)
