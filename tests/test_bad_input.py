"""Bad input and bad parameters: each check on its own, then each entry point.

- **Each check, on its own**: a table per check function, called directly: the
  data checks (``_layout.check_tokens``, ``check_target``), the parameter
  rules (``estimators._rules.validate``, every constructor parameter of every
  estimator), the routed values (``_checks.check_components``), the fit
  keywords, the lengths (``_check_seq_len``), the encoder's sizes and the
  generator's arguments. Each bad value raises the error type of its row,
  with a message that names the argument and says what to do.
- **Each entry point runs them** (``fit``, ``partial_fit``, ``initialize``,
  ``predict``, ``score``, ``predict_attention``, ``set_params``,
  ``FlattenTokens``): one test per entry point makes one refused call per
  check that runs there, on each estimator class, and asserts that nothing
  changed: no epoch began, a fitted estimator keeps its weights, history,
  sizes and parameters, and the files its checkpoint wrote are untouched.
"""

import copy
import pathlib
import re

import numpy as np
import pytest
import scipy.sparse
import torch
from conftest import (
    EACH_KIND,
    ESTIMATORS,
    PAPER,
    Spy,
    assert_unchanged,
    make_estimator,
    make_task,
    snapshot,
)
from sklearn.exceptions import NotFittedError
from skorch.callbacks import EarlyStopping, TrainEndCheckpoint

from sparse_token_estimators import (
    FlattenTokens,
    SparseSelectionStream,
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    make_sparse_selection,
)
from sparse_token_estimators._layout import check_target, check_tokens
from sparse_token_estimators.architectures import check_encoder_sizes
from sparse_token_estimators.estimators import _checks, _rules
from sparse_token_estimators.exceptions import InvalidParameterError

N, T, D = 12, 5, 2
X_OK, Y_OK = make_task(N, seq_len=T, token_dim=D)
LAYOUT = re.escape("(n_samples, seq_len, token_dim + 1)")
#: a position of X_OK whose indicator is 0.0
UNSELECTED = (0, int(np.flatnonzero(X_OK[0, :, -1] == 0)[0]), -1)


def set_at(value, where=(2, 1, 0), dtype=None):
    def edit():
        X = X_OK.astype(dtype) if dtype else X_OK.copy()
        X[where] = value
        return X
    return edit


def other_len(seq_len):
    return make_task(N, seq_len=seq_len, token_dim=D, random_state=1)


def assert_message(exc, pattern):
    assert re.search(pattern, str(exc), flags=re.S), str(exc)


# == each check, on its own ===============================================================

# -- the data: check_tokens and check_target ---------------------------------------------

NAN = r"X contains NaN or infinity.*drop or repair"
NOT_3D = r"X must be a 3-D array.*X\[np.newaxis\]"
INDICATOR = r"indicator.*only 0.0 and 1.0.*Append the indicator"
#: name -> (make X, the error, the argument and the fix); check_tokens(X)
BAD_X = {
    "nan": (set_at(np.nan), ValueError, NAN),
    "inf": (set_at(np.inf), ValueError, NAN),
    "-inf": (set_at(-np.inf), ValueError, NAN),
    "beyond-float32": (set_at(1e39, dtype=np.float64), ValueError,
                       r"X contains NaN or infinity.*float32 range"),
    "none": (lambda: None, ValueError, rf"X is required: an array of shape {LAYOUT}"),
    "scalar": (lambda: 1.0, ValueError, NOT_3D),
    "1d": (lambda: X_OK[0, 0], ValueError, NOT_3D),
    "2d": (lambda: X_OK[0], ValueError, NOT_3D),
    "4d": (lambda: X_OK[None], ValueError, rf"X must be a 3-D array of shape {LAYOUT}"),
    "empty": (lambda: X_OK[:0], ValueError, r"X has 0 samples.*pass at least one"),
    "no-positions": (lambda: X_OK[:, :0], ValueError, r"seq_len >= 1.*last axis holds"),
    "no-token-channel": (lambda: X_OK[..., -1:], ValueError, r"token_dim >= 1.*last axis holds"),
    "strings": (lambda: X_OK.astype(str), ValueError,
                rf"X must be a numeric array of shape {LAYOUT}.*numeric"),
    "object-with-string": (set_at("a", dtype=object), TypeError,
                           rf"X must be a numeric array of shape {LAYOUT}"),
    "object-with-numeric-string": (set_at("1.5", dtype=object), TypeError,
                                   rf"X must be a numeric array of shape {LAYOUT}.*'1.5' "
                                   r"of type str.*Convert it to numbers"),
    "object-with-None": (set_at(None, dtype=object), ValueError, NAN),
    "object-with-dict": (set_at({}, dtype=object), TypeError,
                         rf"X must be a numeric array of shape {LAYOUT}"),
    "complex": (lambda: X_OK + 0j, ValueError, r"X must be a numeric array.*Complex"),
    "sparse": (lambda: scipy.sparse.csr_matrix(X_OK[:, :, 0]), TypeError,
               r"X must be a numeric array.*toarray"),
    "ragged-list": (lambda: [X_OK[0], X_OK[1, :3]], ValueError,
                    rf"X must be a numeric array of shape {LAYOUT}"),
    "indicator-half": (set_at(0.5, (0, 0, -1)), ValueError, INDICATOR),
    "indicator-float64-above-one": (set_at(1 + 1e-9, (0, 0, -1), dtype=np.float64), ValueError,
                                    r"indicator.*only 0.0 and 1.0; found \[1.000000001\]"),
    "indicator-float64-tiny": (set_at(1e-50, UNSELECTED, dtype=np.float64), ValueError,
                               r"indicator.*only 0.0 and 1.0; found \[1e-50\]"),
    "flattened-2d": (lambda: X_OK.reshape(N, -1), ValueError,
                     r"got an array of shape \(12, 15\)\. A flattened array of shape "
                     r"\(n_samples, seq_len \* \(token_dim \+ 1\)\).*needs X\.reshape\("),
    "indicator-two": (set_at(2.0, (0, 0, -1)), ValueError, INDICATOR),
    "indicator-negative": (set_at(-1.0, (0, 0, -1)), ValueError, INDICATOR),
    "no-selected-token": (set_at(0.0, (4, slice(None), -1)), ValueError,
                          r"1 sample\(s\) of X select no token \(e.g. sample 4\).*Set the "
                          r"indicator"),
}


@pytest.mark.parametrize("case", list(BAD_X))
def test_check_tokens_refuses(case):
    make, error, pattern = BAD_X[case]
    with pytest.raises(error) as info:
        check_tokens(make())
    assert_message(info.value, pattern)


def test_check_tokens_refuses_another_token_dim_than_the_fitted_one():
    X, _ = make_task(N, seq_len=T, token_dim=D + 1)
    with pytest.raises(ValueError, match=r"X has token_dim 3.*fitted with token_dim 2.*Pass "
                                         r"tokens of the dimension seen in fit"):
        check_tokens(X, token_dim=D)
    assert check_tokens(X_OK, token_dim=D).shape == X_OK.shape


Y_SHAPE = r"y must have shape \(n_samples, token_dim\) = \(12, 2\)"
#: name -> (make y, the argument and the fix); check_target(y, X_OK), all ValueError
BAD_Y = {
    "none": (lambda: None, r"y is required: an array of shape \(n_samples, token_dim\)"),
    "too-short": (lambda: Y_OK[:-1], Y_SHAPE + r".*got \(11, 2\)"),
    "too-long": (lambda: np.vstack([Y_OK, Y_OK]), Y_SHAPE),
    "1d": (lambda: Y_OK[:, 0], Y_SHAPE + r".*got \(12,\)"),
    "3d": (lambda: Y_OK[..., None], Y_SHAPE),
    "other-token_dim": (lambda: np.hstack([Y_OK, Y_OK]), Y_SHAPE + r".*got \(12, 4\)"),
    "empty": (lambda: Y_OK[:0], Y_SHAPE),
    "nan": (lambda: np.where(np.arange(N)[:, None] == 3, np.nan, Y_OK),
            r"y contains NaN or infinity in 1 sample\(s\) \(e.g. sample 3.*drop or repair"),
    "inf": (lambda: np.full_like(Y_OK, np.inf), r"y contains NaN or infinity.*drop"),
    "strings": (lambda: Y_OK.astype(str),
                r"y must be a numeric array of shape \(n_samples, token_dim\)"),
}


@pytest.mark.parametrize("case", list(BAD_Y))
def test_check_target_refuses(case):
    make, pattern = BAD_Y[case]
    with pytest.raises(ValueError) as info:
        check_target(make(), X_OK)
    assert_message(info.value, pattern)


# -- the parameters: _rules.validate ---------------------------------------------------

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
    "lr_schedule": ["cos", "Cosine", None, 1],
    "module": ["SparseTokenAttention", None],
}
CLASSES = {cls.__name__: cls for cls in (SparseTokenTransformer, SparseTokenFCN,
                                         SparseTokenEncoder, SparseTokenRNN,
                                         SparseTokenSSM)}
OWN_BAD_PARAMS = {
    "SparseTokenTransformer": {"pe_dim": [0, -1, 2.5, "64", None, True],
                               "n_pe_draws": [0, -1, 1.5, None],
                               "max_seq_len": [0, 2.5, None],
                               "positional_encoding": ["rope", None, 1],
                               "output_map": ["yes", None, 1]},
    "SparseTokenFCN": {"seq_len": [0, -1, 2.5, "5", True],
                       "hidden_width": [0, -1, 2.5, "8", None],
                       "n_hidden_layers": [0, -1, 1.5, None]},
    "SparseTokenEncoder": {"d_model": [0, -1, 2.5, "32", None, True],
                           "n_heads": [0, 1.5, None],
                           "n_layers": [-1, 1.5, None, True],
                           "positional_encoding": ["alibi", None, 1],
                           "max_seq_len": [0, 2.5, None]},
    "SparseTokenRNN": {"cell": ["tcn", None, 1], "hidden_size": [0, -1, 2.5, "8", None],
                       "n_layers": [0, -1, 1.5, None]},
    "SparseTokenSSM": {"d_model": [0, -1, 2.5, "32", None, True],
                       "d_state": [0, -1, 2.5, "16", None, True],
                       "n_layers": [0, -1, 1.5, None, True]},
}
# The fix some messages must carry, written out here (beyond the hint's own text).
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
    ("cell", "tcn"): r"Pass 'gru', 'lstm' or 'rnn'",
    ("n_heads", 0): r"it must divide d_model",
}


def assert_names_the_parameter(exc, class_name, param, value):
    """scikit-learn's message (the parameter, the class, the value), then the fix."""
    # InvalidParameterError: both a ValueError and a TypeError
    assert isinstance(exc, ValueError) and isinstance(exc, TypeError)
    message = str(exc)
    pattern = (rf"^The '{param}' parameter of {class_name} must be .+\. "
               rf"Got {re.escape(repr(value))} instead\. \S")  # ... and the fix follows
    assert re.search(pattern, message, flags=re.S), message
    fix = FIXES.get((param, value)) if isinstance(value, (str, int, float)) else None
    assert fix is None or re.search(fix, message), message


def param_rows():
    for class_name, own in OWN_BAD_PARAMS.items():
        for param in {**BAD_PARAMS, **own}:
            yield pytest.param(class_name, param, id=f"{class_name}-{param}")


@pytest.mark.parametrize("class_name, param", list(param_rows()))
def test_validate_refuses_every_bad_value(class_name, param):
    constraints = CLASSES[class_name]._parameter_rules
    hint = _rules.HINTS[param]
    for value in OWN_BAD_PARAMS[class_name].get(param, BAD_PARAMS.get(param)):
        with pytest.raises(InvalidParameterError) as info:
            _rules.validate(constraints, {param: value}, class_name)
        assert_names_the_parameter(info.value, class_name, param, value)
        fix = hint(value) if callable(hint) else hint
        assert fix and str(info.value).endswith(" " + fix), str(info.value)


@pytest.mark.parametrize("class_name", list(CLASSES))
def test_every_parameter_has_bad_values_and_a_fix(class_name):
    # every parameter (deep=False leaves out skorch's at their defaults, as repr does)
    params = {name for name in CLASSES[class_name]().get_params(deep=True)
              if not name.startswith("callbacks__")}
    assert params == set(BAD_PARAMS) | set(OWN_BAD_PARAMS[class_name])
    assert params <= set(_rules.HINTS)
    # the catalogue's values pass
    for name in ESTIMATORS:
        if type(make_estimator(name)).__name__ == class_name:
            _rules.validate(CLASSES[class_name]._parameter_rules,
                             make_estimator(name).get_params(deep=False), class_name)


# -- routed values, fit keywords, lengths, the encoder's sizes ----------------------------

REFUSED_BY = r"{} (is|are) refused by {}: .*Pass values \w+ accepts.*Nothing was changed"
#: (the component, the routed values, the pattern: the values and the component
#: named); _checks.check_components
ROUTED = [
    ({}, dict(criterion__reduction="bogus"),
     REFUSED_BY.format(r"criterion__reduction='bogus'", "criterion=MSELoss")),
    ({}, dict(optimizer__momentum=-1),
     REFUSED_BY.format(r"optimizer__momentum=-1", "optimizer=Adam")),
    (dict(optimizer=torch.optim.SGD), dict(optimizer__momentum=-1),
     r"optimizer__momentum=-1 is refused by optimizer=SGD: Invalid momentum value"),
    ({}, dict(iterator_train__bogus=1),
     REFUSED_BY.format(r"iterator_train__bogus=1.*", "iterator_train=TensorBatches")),
    ({}, dict(iterator_valid__bogus=1),
     REFUSED_BY.format(r"iterator_valid__bogus=1", "iterator_valid=TensorBatches")),
]


@pytest.mark.parametrize("component, routed, pattern", ROUTED,
                         ids=[str(r) for _, r, _ in ROUTED])
def test_check_components_refuses_routed_values(component, routed, pattern):
    with pytest.raises(ValueError) as info:
        _checks.check_components(make_estimator("fcn", **component, **routed), iterators=True)
    assert_message(info.value, pattern)
    # as values about to be set (set_params) too
    with pytest.raises(ValueError) as info:
        _checks.check_components(make_estimator("fcn", **component), routed, iterators=True)
    assert_message(info.value, pattern)
    _checks.check_components(make_estimator("fcn", **component), iterators=True)  # defaults pass


@pytest.mark.parametrize("name", EACH_KIND)
def test_check_fit_params_refuses_what_forward_does_not_take(name):
    est = make_estimator(name)
    module = est.module.__name__
    with pytest.raises(TypeError, match=r"\.fit does not support sample_weight.*np\.repeat"):
        _checks.check_fit_params(est, {"sample_weight": np.ones(N)}, "fit")
    with pytest.raises(TypeError, match=rf"\.partial_fit got the keyword argument\(s\) bogus, "
                                        rf"which {module}\.forward does not take.*pass X and y"):
        _checks.check_fit_params(est, {"bogus": 1}, "partial_fit")
    _checks.check_fit_params(est, {}, "fit")


FCN_LEN = (r"X has seq_len 7, but this SparseTokenFCN was fitted on seq_len 5.*Use "
           r"SparseTokenTransformer")
TABLE_LEN = (r"X has seq_len 20 but the fixed positional encoding has only max_seq_len=16.*"
             r"Refit with max_seq_len >= 20, or use positional_encoding=")
#: (estimator, seq_len, while fitting, the pattern or None: accepted); _check_seq_len
SEQ_LEN = [("fcn", 7, False, FCN_LEN), ("fcn", 7, True, None),
           ("transformer-fixed", 20, False, TABLE_LEN + "'stochastic'"),
           ("transformer-fixed", 20, True, TABLE_LEN), ("transformer-fixed", 16, False, None),
           ("encoder-fixed", 20, True, TABLE_LEN + r"'none' or 'rope'"),
           ("transformer", 40, False, None), ("encoder", 40, False, None),
           ("rnn", 40, False, None), ("ssm", 40, False, None)]


@pytest.mark.parametrize("name, seq_len, fitting, pattern", SEQ_LEN)
def test_check_seq_len(name, seq_len, fitting, pattern, fitted):
    est = fitted[name]
    if pattern is None:
        est._check_seq_len(seq_len, fitting=fitting)
        return
    with pytest.raises(ValueError) as info:
        est._check_seq_len(seq_len, fitting=fitting)
    assert_message(info.value, pattern)


ENCODER_SIZES = [
    (dict(d_model=10, n_heads=4), r"d_model=10 must be a multiple of n_heads=4.*d_model=12"),
    (dict(d_model=12, n_heads=4, positional_encoding="rope"), r"d_model / n_heads must be even"),
    (dict(d_model=9, n_heads=1, positional_encoding="sinusoidal"), r"d_model must be even"),
]


@pytest.mark.parametrize("sizes, pattern", ENCODER_SIZES)
def test_check_encoder_sizes(sizes, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_encoder_sizes(sizes["d_model"], sizes["n_heads"],
                            sizes.get("positional_encoding", "none"))
    check_encoder_sizes(12, 4, "none")


# == each entry point runs the checks =====================================================

@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One estimator of each class (and the fixed tables), fitted with a spy and a
    checkpoint, and a FlattenTokens. Shared: a test works on a copy (``copy_of``)."""
    torch.set_num_threads(1)
    ests = {}
    for name in EACH_KIND:
        directory = tmp_path_factory.mktemp(name)
        ests[name] = make_estimator(name, callbacks=[
            ("spy", Spy()), ("end", TrainEndCheckpoint(dirname=str(directory)))]).fit(X_OK, Y_OK)
    ests["flatten"] = FlattenTokens().fit(X_OK)
    return ests


def files(est):
    """Every file in the estimator's checkpoint directory: its bytes and when written."""
    directory = pathlib.Path(dict(est.callbacks)["end"].dirname)
    written = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.iterdir()}
    assert written  # the fit wrote its checkpoint: there is something to leave alone
    return written


def refuse(est, method, args, pattern, kwargs=None):
    """Call ``est.method(*args, **kwargs)``, which must be refused; assert the
    message and that nothing changed."""
    before = snapshot(est)
    written = files(est) if "module_" in vars(est) else None
    with pytest.raises((ValueError, TypeError)) as info:
        getattr(est, method)(*args, **(kwargs or {}))
    assert_message(info.value, pattern)
    assert_unchanged(before, snapshot(est))
    if written is not None:
        assert files(est) == written


def refuse_fresh(name, params, method, args, pattern, tmp_path, kwargs=None):
    """As ``refuse``, on a fresh estimator: nothing built, no epoch, no file."""
    spy = Spy()
    est = make_estimator(name, **params, callbacks=[
        ("spy", spy), ("end", TrainEndCheckpoint(dirname=str(tmp_path)))])
    with pytest.raises((ValueError, TypeError)) as info:
        getattr(est, method)(*args, **(kwargs or {}))
    assert_message(info.value, pattern)
    assert not hasattr(est, "module_") and not est.initialized_
    assert not hasattr(spy, "events") or spy.events == []
    assert list(tmp_path.iterdir()) == []


def copy_of(fitted, name, **params):
    est = copy.deepcopy(fitted[name])
    return est.set_params(**params) if params else est


def refuse_with(params, est, fitted, name, method, args, pattern, kwargs=None):
    """``refuse`` with ``params`` set for the call: on ``est``, set back after it, or
    on a fresh copy of ``fitted[name]`` for a routed name that ``est`` lacks (a
    set routed name cannot be unset)."""
    old = est.get_params(deep=False)
    if any(key not in old for key in params):
        refuse(copy_of(fitted, name, **params), method, args, pattern, kwargs)
        return
    est.set_params(**params)
    refuse(est, method, args, pattern, kwargs)
    est.set_params(**{key: old[key] for key in params})


def stream(**sizes):
    args = {"seq_len": T, "token_dim": D, "n_selected": 2, **sizes}
    return SparseSelectionStream(**args, n_samples=N, random_state=0, device="cpu")


BAD_PARAM = r"The 'batch_size' parameter of \w+ must be an int .*Got 0 instead\. It is"
#: each check that a training call runs: (check, applies to, params, X, y, fit keywords, pattern)
TRAINING_CHECKS = [
    ("check_tokens", "all", {}, BAD_X["nan"][0], lambda: Y_OK, {}, NAN),
    ("check_target", "all", {}, lambda: X_OK, lambda: Y_OK[:-1], {}, Y_SHAPE),
    ("validate", "all", dict(batch_size=0), lambda: X_OK, lambda: Y_OK, {}, BAD_PARAM),
    ("check_components", "all", dict(iterator_train__bogus=1), lambda: X_OK, lambda: Y_OK, {},
     REFUSED_BY.format(r"iterator_train__bogus=1.*", "iterator_train=TensorBatches")),
    ("check_fit_params", "all", {}, lambda: X_OK, lambda: Y_OK, dict(bogus=1),
     r"got the keyword argument\(s\) bogus, which \w+\.forward does not take"),
    ("sizes given", "all", dict(token_dim=D + 3), lambda: X_OK, lambda: Y_OK, {},
     r"X of shape \(12, 5, 3\) has token_dim 2, but \w+ was given token_dim=5\. Set "
     r"token_dim=None"),
    ("check_stream", "all", {}, stream, lambda: Y_OK, {},
     r"y must be None when X is a SparseSelectionStream.*Call fit\(stream\)"),
    ("seq_len", "fixed", {}, lambda: other_len(20)[0], lambda: other_len(20)[1], {}, TABLE_LEN),
    ("encoder sizes", "encoder", dict(d_model=10, n_heads=4), lambda: X_OK, lambda: Y_OK, {},
     r"d_model=10 must be a multiple of n_heads=4"),
]
#: the checks only a continued fit (partial_fit of a fitted estimator) runs
CONTINUED_CHECKS = [
    ("fitted token_dim", "all", {}, lambda: make_task(N, seq_len=T, token_dim=D + 1)[0],
     lambda: make_task(N, seq_len=T, token_dim=D + 1)[1], {},
     r"X has token_dim 3.*fitted with token_dim 2"),
    ("stream token_dim", "all", {}, lambda: stream(token_dim=D + 1), lambda: None, {},
     r"The stream has token_dim 3, but the estimator was fitted with token_dim 2"),
    ("fitted seq_len", "fcn", {}, lambda: other_len(T + 2)[0], lambda: other_len(T + 2)[1], {},
     FCN_LEN),
]


def applies(scope, name):
    return (scope == "all" or (scope == "fixed" and name.endswith("-fixed"))
            or name.startswith(scope))


def training_cases(name, checks=TRAINING_CHECKS):
    return [(check, params, X, y, kwargs, pattern)
            for check, scope, params, X, y, kwargs, pattern in checks if applies(scope, name)]


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
@pytest.mark.parametrize("name", EACH_KIND)
def test_training_on_a_fresh_estimator_runs_every_check(name, method, tmp_path):
    cases = training_cases(name)
    cases.append(("routed names", dict(optimizer_weight_decay=1), lambda: X_OK, lambda: Y_OK, {},
                  r"unexpected argument optimizer_weight_decay, did you mean "
                  r"optimizer__weight_decay"))
    for check, params, X, y, kwargs, pattern in cases:
        directory = tmp_path / check.replace(" ", "-")
        directory.mkdir()
        refuse_fresh(name, params, method, (X(), y()), pattern, directory, kwargs)


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
@pytest.mark.parametrize("name", EACH_KIND)
def test_training_a_fitted_estimator_runs_every_check_and_changes_nothing(name, method,
                                                                         fitted):
    cases = training_cases(name)
    if method == "partial_fit":
        cases += training_cases(name, CONTINUED_CHECKS)
    est = copy_of(fitted, name)
    start = snapshot(est)
    for _check, params, X, y, kwargs, pattern in cases:
        refuse_with(params, est, fitted, name, method, (X(), y()), pattern, kwargs)
    assert_unchanged(start, snapshot(est))


@pytest.mark.parametrize("name", EACH_KIND)
def test_initialize_runs_the_parameter_checks(name, fitted, tmp_path):
    cases = [("validate", dict(batch_size=0), BAD_PARAM),
             ("check_components", dict(iterator_valid__bogus=1),
              REFUSED_BY.format("iterator_valid__bogus=1", "iterator_valid=TensorBatches"))]
    if name.startswith("encoder"):
        cases.append(("encoder sizes", dict(d_model=10, n_heads=4),
                      r"d_model=10 must be a multiple of n_heads=4"))
    est = copy_of(fitted, name)
    for check, params, pattern in cases:
        directory = tmp_path / check.replace(" ", "-")
        directory.mkdir()
        refuse_fresh(name, dict(params, token_dim=D), "initialize", (), pattern, directory)
        refuse_with(params, est, fitted, name, "initialize", (), pattern)
    directory = tmp_path / "routed-names"
    directory.mkdir()
    refuse_fresh(name, dict(optimizer_weight_decay=1, token_dim=D), "initialize", (),
                 r"did you mean optimizer__weight_decay", directory)


#: every parameter that prediction reads (``estimators._rules.PREDICTION``), with a bad value
PREDICTION = {"batch_size": 0, "iterator_valid": None, "dataset": None,
              "predict_nonlinearity": 1, "device": "tpu", "compile": "yes", "n_pe_draws": 0}


def prediction_cases(name, method):
    cases = [("check_tokens", {}, BAD_X["nan"][0], NAN),
             ("fitted token_dim", {}, lambda: make_task(N, seq_len=T, token_dim=D + 1)[0],
              r"X has token_dim 3.*fitted with token_dim 2"),
             ("stream", {}, stream, r"A SparseSelectionStream is for training.*"
                                    r"make_sparse_selection\(n_samples"),
             ("flattened", {}, lambda: X_OK.reshape(N, -1), r"needs X\.reshape\(12, 5, 3\)")]
    cases += [(param, {param: value}, lambda: X_OK,
               rf"The '{param}' parameter of \w+ must be .*Got {re.escape(repr(value))} instead")
              for param, value in PREDICTION.items()
              if param in make_estimator(name).get_params()]
    if name == "fcn":
        cases.append(("seq_len", {}, lambda: other_len(T + 2)[0], FCN_LEN))
    if name.endswith("-fixed"):
        cases.append(("seq_len", {}, lambda: other_len(20)[0], TABLE_LEN))
    return cases


#: the arguments of each prediction method beyond X
PREDICTING = {"predict": (), "score": (Y_OK,), "predict_attention": ()}


@pytest.mark.parametrize("name, method", [
    (name, method) for name in EACH_KIND for method in PREDICTING
    if hasattr(make_estimator(name), method)])  # the FCN and the RNN have no attention
def test_prediction_runs_every_check_and_changes_nothing(name, method, fitted):
    rest = PREDICTING[method]
    est = copy_of(fitted, name)
    start = snapshot(est)
    for _check, params, X, pattern in prediction_cases(name, method):
        refuse_with(params, est, fitted, name, method, (X(), *rest), pattern)
    if method == "score":  # the target too
        refuse(est, "score", (X_OK, Y_OK[:-1]), Y_SHAPE)
    assert_unchanged(start, snapshot(est))
    with pytest.raises(NotFittedError):  # and that there is a fitted model
        getattr(make_estimator(name), method)(X_OK, *rest)
    np.testing.assert_array_equal(est.predict(X_OK), fitted[name].predict(X_OK))


def optimizer_settings(est):
    return [{k: v for k, v in group.items() if k != "params"}
            for group in est.optimizer_.param_groups]


@pytest.mark.parametrize("name", EACH_KIND)
def test_set_params_on_a_fitted_estimator_refuses_bad_routed_values(name, fitted):
    for component, routed, pattern in ROUTED[:3]:  # the optimizer's and criterion's
        est = copy_of(fitted, name)
        if component:  # the live optimizer: of the class the values are for
            est.set_params(**component).partial_fit(X_OK, Y_OK)
        settings = optimizer_settings(est)
        refuse(est, "set_params", (), pattern, routed)
        assert optimizer_settings(est) == settings  # the live optimizer got nothing
        assert est.criterion_.reduction == "mean"


def test_flatten_tokens_runs_its_checks_and_changes_nothing(fitted):
    for method, X, pattern in [
            ("fit", BAD_X["nan"][0](), NAN), ("transform", BAD_X["2d"][0](), NOT_3D),
            ("transform", make_task(N, seq_len=T, token_dim=D + 1)[0],
             r"X has token_dim 3.*fitted with token_dim 2"),
            ("transform", other_len(T + 2)[0],
             r"X has seq_len 7 but FlattenTokens was fitted on seq_len 5.*use "
             r"SparseTokenTransformer")]:
        refuse(fitted["flatten"], method, (X,), pattern)


def test_the_entry_point_tests_cover_every_estimator_class():
    assert {type(make_estimator(name)) for name in EACH_KIND} == set(CLASSES.values())
    assert set(PREDICTION) == set(_rules.PREDICTION)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("name", PAPER)
def test_absent_gpu_is_refused_before_anything_is_built(name):
    est = make_estimator(name, device="cuda")
    with pytest.raises(ValueError, match="no CUDA GPU is available; use device='auto'"):
        est.fit(X_OK, Y_OK)
    assert not hasattr(est, "module_")


@pytest.mark.parametrize("name", ["transformer", "fcn"])
def test_routed_arguments_reach_their_component_and_typos_are_refused(name):
    # skorch's check of prefix__name arguments runs before anything is built,
    # and knows the components a fresh estimator has not built yet.
    est = make_estimator(name, optimizer__weight_decay=0.1, criterion__reduction="sum",
                         module__token_dim=D)
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


#: (kind, accepted values, refused values): the rules' building blocks
KINDS = [
    (lambda: _rules.Count(1), [1, 2, np.int64(3)], [0, -1, 1.5, "1", True, np.bool_(True), None]),
    (lambda: _rules.Count(0), [0, 5], [-1, False]),
    (lambda: _rules.NON_NEGATIVE, [0, 0.5, 3], [-0.1, float("nan"), float("inf"), True, "1"]),
    (lambda: _rules.OneOf("a", "b"), ["a", "b"], ["A", "c", None, 1]),
    (lambda: _rules.OneOf(-1), [-1], [-2, "-1", 1.0 - 2.0]),
    (lambda: _rules.BOOLEAN, [True, False, np.bool_(True)], [0, 1, "yes", None]),
    (lambda: _rules.RANDOM_STATE, [None, 0, 2**32 - 1, np.random.RandomState(0)],
     [-1, 2**32, 1.5, "a"]),
    (lambda: _rules.VERBOSE, [0, 1, True], [-1, 1.5, None, "loud"]),
    (lambda: _rules.DEVICE, ["auto", "cpu", "cuda", "cuda:1", torch.device("cpu")],
     ["tpu", "meta", 1, None]),
    (lambda: _rules.CALLBACKS, [[], [EarlyStopping()], [("stop", EarlyStopping())],
                                [("off", None)], [EarlyStopping]],
     ["x", [1], ["EarlyStopping"], [("stop",)], EarlyStopping()]),
]


@pytest.mark.parametrize("make_kind, accepted, refused", KINDS)
def test_parameter_kinds_accept_and_refuse(make_kind, accepted, refused):
    kind = make_kind()
    assert all(kind.accepts(value) for value in accepted), str(kind)
    assert not any(kind.accepts(value) for value in refused), str(kind)


def test_invalid_parameter_error_is_a_value_and_a_type_error():
    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)
    assert SparseTokenTransformer._parameter_rules is _rules.TRANSFORMER
    assert SparseTokenFCN._parameter_rules is _rules.FCN
    assert SparseTokenEncoder._parameter_rules is _rules.ENCODER
    assert SparseTokenRNN._parameter_rules is _rules.RNN
    with pytest.raises(InvalidParameterError, match=r"^The 'x' parameter of f must be a str "
                                                    r"among \{'a'\}\. Got 'b' instead\.$"):
        _rules.validate({"x": [_rules.OneOf("a")]}, {"x": "b"}, "f")
    _rules.validate({"x": [_rules.OneOf("a")]}, {"y": "b"}, "f")  # no rule, not checked
    assert SparseTokenSSM._parameter_rules is _rules.SSM


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


@pytest.mark.parametrize("est_name", PAPER)
@pytest.mark.parametrize("case", list(EMPTY_EPOCH))
def test_a_fit_that_takes_no_step_is_an_error_not_a_model(est_name, case):
    params, pattern = EMPTY_EPOCH[case]
    for method in ("fit", "partial_fit"):
        est = make_estimator(est_name).set_params(**params)
        with pytest.raises(ValueError, match=pattern + r".*reset to unfitted"):
            getattr(est, method)(X_OK, Y_OK)
        assert not est.initialized_ and not hasattr(est, "module_")
        with pytest.raises(NotFittedError):
            est.predict(X_OK)
        assert est.history_ is None  # as before the call: the empty epoch is not recorded


@pytest.mark.parametrize("est_name", PAPER)
def test_continuing_with_an_empty_epoch_keeps_the_model(est_name, fitted):
    est = copy_of(fitted, est_name, iterator_train__drop_last=True, batch_size=32)
    before = snapshot(est)
    with pytest.raises(ValueError, match="took no optimisation step.*keeps its model"):
        est.partial_fit(X_OK, Y_OK)
    after = snapshot(est)
    before.pop("events"), after.pop("events")  # the spy saw the empty epoch begin
    assert_unchanged(before, after)


def test_batches_running_out_mid_fit_is_an_error_after_what_trained():
    est = make_estimator("fcn").set_params(iterator_train=OneEpochOnly, max_epochs=3)
    with pytest.raises(ValueError, match="Epoch 2 took no optimisation step.*keeps its model"):
        est.fit(X_OK, Y_OK)
    assert len(est.history_) == 1 and est.history_[-1, "train_batch_count"] == 1
    assert est.predict(X_OK).shape == Y_OK.shape  # the epoch that trained is kept


def test_batch_size_minus_one_trains_on_everything_at_once():
    for name in ("transformer", "fcn"):
        est = make_estimator(name).set_params(batch_size=-1, max_epochs=2).fit(X_OK, Y_OK)
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
        fitted["transformer"].predict(flat)
    np.testing.assert_array_equal(fitted["transformer"].predict(flat.reshape(12, 5, 3)),
                                  fitted["transformer"].predict(X_OK))


def test_a_flattened_dataframe_is_told_to_reshape_its_values(fitted):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X_OK.reshape(N, -1))
    with pytest.raises(ValueError, match=r"A flattened pandas DataFrame of shape .*needs "
                                         r"X\.to_numpy\(\)\.reshape\(12, 5, 3\)") as info:
        fitted["transformer"].predict(frame)
    assert "np.newaxis" not in str(info.value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_tensors_of_float_types_numpy_lacks_are_widened_exactly(dtype, fitted):
    # every bfloat16 (and float16) value is a float32: the cast loses nothing
    X = torch.as_tensor(X_OK).to(dtype)
    est = fitted["transformer"]
    np.testing.assert_array_equal(est.predict(X), est.predict(X.float()))


def test_values_beyond_float32_are_refused_with_the_limit_named():
    from sparse_token_estimators._layout import check_tokens

    X = X_OK.astype(np.float64)
    X[1, 0, 0] = -1e39
    with pytest.raises(ValueError, match=r"sample 1; values beyond the float32 range, about "
                                         r"3.4e38, count as infinite"):
        check_tokens(X)


def test_a_new_optimizer_and_its_values_can_be_set_together_on_a_fitted_estimator(fitted):
    est = copy_of(fitted, "fcn")  # fitted with Adam, which takes no momentum
    est.set_params(optimizer=torch.optim.SGD, optimizer__momentum=0.9)
    est.partial_fit(X_OK, Y_OK)
    assert est.optimizer_.param_groups[0]["momentum"] == 0.9


# -- the layout named, sample_weight refused where it is requested ----------------------


@pytest.mark.parametrize("name", EACH_KIND)
def test_query_layout_X_in_an_indicator_estimator_says_to_pass_the_layout(name):
    X, y = make_sparse_selection(40, T, D, 2, layout="query", random_state=0)
    est = make_estimator(name)
    params = est.get_params(deep=False)
    with pytest.raises(ValueError, match=r"X is in the query layout\. Pass layout='query' to "
                                         r"the estimator.*to_indicator_layout"):
        est.fit(X, y)
    assert not hasattr(est, "module_") and est.get_params(deep=False).keys() == params.keys()
    make_estimator(name, layout="query", max_epochs=1).fit(X, y)  # the fix works


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
@pytest.mark.parametrize("request_value", [True, "weights"])
def test_set_fit_request_refuses_sample_weight(request_value, method):
    import sklearn

    est = make_estimator("fcn")
    setter = getattr(est, f"set_{method}_request")
    with sklearn.config_context(enable_metadata_routing=True):
        before = str(est.get_metadata_routing())
        with pytest.raises(TypeError, match=rf"SparseTokenFCN\.{method} does not support "
                                            r"sample_weight.*cannot be requested.*repeat"):
            setter(sample_weight=request_value)
        assert str(est.get_metadata_routing()) == before  # nothing changed
        assert setter(sample_weight=False) is est
        assert est.set_score_request(sample_weight=True) is est  # score takes weights
