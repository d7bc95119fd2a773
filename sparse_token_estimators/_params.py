"""The rules for every constructor parameter of the estimators, in one place.

Two things are known here and nowhere else:

- **What a parameter accepts** (``TRANSFORMER``, ``FCN``): scikit-learn's own
  parameter constraints (``sklearn.utils._param_validation``, the machinery
  behind ``_parameter_constraints`` and ``check_param_validation``), for the
  package's parameters and for those the estimators inherit from skorch.
  ``validate`` checks them when ``fit``, ``partial_fit`` or ``initialize``
  starts and adds, from ``HINTS``, the likely fix to scikit-learn's message.
- **What changing a parameter does to a fitted estimator** (``GROUPS``):
  "structural" parameters make the fitted module no longer match (the
  estimator reads as unfitted until it is refit, or the value is set back);
  "applied" ones are applied to the fitted module at its next use; the
  "settings" are read where they are used (training, prediction) and keep
  the fit; "internal" is skorch's own bookkeeping.
"""

import numbers
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    Options,
    StrOptions,
    validate_parameter_constraints,
)
from skorch.callbacks import Callback

from .architectures import CELLS, ENCODER_ENCODINGS
from .positional import ENCODINGS

# -- constraints ------------------------------------------------------------------


class _NotBool:
    """Mixin: a bool is an int to Python, never a size or a rate here."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


class Count(_NotBool, Interval):
    """An integer >= ``left``, bools refused."""

    def __init__(self, left):
        super().__init__(Integral, left, None, closed="left")


class NonNegative(_NotBool, Interval):
    """A finite real number >= 0, bools refused."""

    def __init__(self):
        super().__init__(Real, 0, np.inf, closed="left")


class _Rule(Options):
    """A constraint of our own: scikit-learn's validation takes only its own
    constraint classes, so ours are ``Options`` that override the test."""

    def __init__(self):
        super().__init__(object, set())


class Device(_Rule):
    """"auto", or a device string / torch.device of type cpu or cuda.

    Whether a CUDA device is there is a fact of the machine, not of the value:
    ``_device.resolve_device`` says so, after the constraints.
    """

    def is_satisfied_by(self, val):
        if isinstance(val, str) and val == "auto":
            return True
        if not isinstance(val, (str, torch.device)):
            return False
        try:
            return torch.device(val).type in ("cpu", "cuda")
        except (RuntimeError, TypeError, ValueError):
            return False

    def __str__(self):
        return "'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device of those"


class CallbackList(_Rule):
    """A list of skorch callbacks (instances or classes) or (name, callback) pairs."""

    @staticmethod
    def _is_callback(cb):
        return isinstance(cb, Callback) or (isinstance(cb, type) and issubclass(cb, Callback))

    def is_satisfied_by(self, val):
        if not isinstance(val, list):
            return False
        for item in val:
            if isinstance(item, (tuple, list)):
                if not (len(item) == 2 and isinstance(item[0], str)
                        and (item[1] is None or self._is_callback(item[1]))):
                    return False
            elif not self._is_callback(item):
                return False
        return True

    def __str__(self):
        return "a list of skorch callbacks or (name, callback) pairs"


POSITIVE = [Count(1)]
BOOLEAN = ["boolean"]

#: skorch's constructor parameters, as both estimators take them
SKORCH = {
    "module": [callable],
    "criterion": [callable],
    "optimizer": [callable],
    "lr": [NonNegative()],
    "max_epochs": POSITIVE,
    "batch_size": [Count(1), Options(Integral, {-1})],
    "iterator_train": [callable],
    "iterator_valid": [callable],
    "iterator_train__shuffle": BOOLEAN,
    "dataset": [callable],
    "train_split": [None, callable],
    "callbacks": [None, StrOptions({"disable"}), CallbackList()],
    "predict_nonlinearity": [None, StrOptions({"auto"}), callable],
    "warm_start": BOOLEAN,
    "verbose": ["verbose"],
    "device": [None, Device()],
    "compile": BOOLEAN,
    "use_caching": [StrOptions({"auto"}), "boolean"],
    "torch_load_kwargs": [None, dict],
    "_params_to_validate": "no_validation",  # skorch's bookkeeping, not a setting
}

#: both estimators' own parameters
COMMON = {
    "random_state": ["random_state"],
    "token_dim": [None, Count(1)],
    "layout": [StrOptions({"indicator", "query"})],
    "n_selected": [None, Count(1)],
    "lr_schedule": [StrOptions({"constant", "cosine"})],
}

TRANSFORMER = {
    **SKORCH, **COMMON,
    "pe_dim": POSITIVE,
    "positional_encoding": [StrOptions(ENCODINGS.keys())],  # keys: a stable order
    "max_seq_len": POSITIVE,
    "n_pe_draws": POSITIVE,
    "output_map": BOOLEAN,
}

FCN = {
    **SKORCH, **COMMON,
    "seq_len": [None, Count(1)],
    "hidden_width": POSITIVE,
    "n_hidden_layers": POSITIVE,
}

# the architectures beyond the paper's two (``_more_estimators``)
ENCODER = {
    **SKORCH, **COMMON,
    "d_model": POSITIVE,
    "n_heads": POSITIVE,
    "n_layers": [Count(0)],
    "positional_encoding": [StrOptions(dict.fromkeys(ENCODER_ENCODINGS).keys())],  # a stable order
    "max_seq_len": POSITIVE,
}

RNN = {
    **SKORCH, **COMMON,
    "cell": [StrOptions(CELLS.keys())],
    "hidden_size": POSITIVE,
    "n_layers": POSITIVE,
}

# the selective state-space model (``_ssm_estimator``)
SSM = {
    **SKORCH, **COMMON,
    "d_model": POSITIVE,
    "d_state": POSITIVE,
    "n_layers": POSITIVE,
}

#: what prediction reads: checked by predict, score and predict_attention too
PREDICTION = ("batch_size", "iterator_valid", "dataset", "predict_nonlinearity",
              "device", "compile", "n_pe_draws")


# -- the fix for each parameter ---------------------------------------------------


def _train_split_hint(value):
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < 1:
        return (f"For a validation fraction, pass train_split="
                f"skorch.dataset.ValidSplit({value}).")
    return ("Pass None (no internal validation, the default) or a splitter such as "
            "skorch.dataset.ValidSplit(5) (holds out 20%) or ValidSplit(0.2).")


def _class_hint(name, example, kind):
    def hint(value):
        text = f"Pass the {kind} class, e.g. {name}={example}"
        if isinstance(value, str):
            text += f", not a string ({value!r})"
        return text + f"; its arguments go in {name}__<argument>=value."
    return hint


HINTS = {
    "module": "Pass the torch module class; its arguments go in module__<argument>=value.",
    "criterion": _class_hint("criterion", "torch.nn.MSELoss", "loss"),
    "optimizer": _class_hint("optimizer", "torch.optim.Adam", "optimizer"),
    "lr": "It is the learning rate: a finite number >= 0, e.g. lr=0.01.",
    "max_epochs": ("It is the number of passes over the training data, at least 1 "
                   "(0 would return a model that never trained), e.g. max_epochs=15."),
    "batch_size": ("It is the number of sequences per optimisation step, e.g. "
                   "batch_size=256; -1 takes all of them as one batch."),
    "iterator_train": ("Pass a callable (dataset, **kwargs) -> batches, such as the "
                       "default TensorBatches or torch.utils.data.DataLoader."),
    "iterator_valid": ("Pass a callable (dataset, **kwargs) -> batches, such as the "
                       "default TensorBatches or torch.utils.data.DataLoader."),
    "iterator_train__shuffle": "Pass True (reshuffle every epoch, the default) or False.",
    "dataset": "Pass a callable such as skorch.dataset.Dataset (the default).",
    "train_split": _train_split_hint,
    "callbacks": ("Pass a list, e.g. callbacks=[EarlyStopping(monitor='train_loss')] "
                  "or callbacks=[('stop', EarlyStopping())]; None for none."),
    "predict_nonlinearity": ("Pass 'auto' or None (for a regressor both mean no "
                             "nonlinearity) or a callable applied to the predictions."),
    "warm_start": ("Pass True (the next fit continues from the fitted model) or False "
                   "(it starts afresh, the default)."),
    "verbose": "Pass 0 (silent, the default) or 1 (a table of the losses per epoch).",
    "device": "Pass 'auto' (a GPU when present, the default), 'cpu', 'cuda' or 'cuda:N'.",
    "compile": ("Pass True to compile the module with torch.compile, or False; its "
                "arguments go in compile__<argument>=value (e.g. compile__backend='eager')."),
    "use_caching": "Pass 'auto' (the default), True or False.",
    "torch_load_kwargs": "Pass None or a dict of torch.load arguments.",
    "random_state": "Pass an int seed (e.g. random_state=0), a numpy RandomState or None.",
    "token_dim": ("It is the token dimension d: None learns it from X at fit; an int "
                  "fixes it, so that initialize() builds the module without data."),
    "seq_len": ("It is the sequence length T: None learns it from X at fit; an int "
                "fixes it, so that initialize() builds the module without data."),
    "layout": ("Pass 'indicator' (the subset as a 0/1 last channel of the token rows, the "
               "default) or 'query' (the subset as n_selected rows [0_d, i_j] of 1-based "
               "positions after the tokens), the layout of make_sparse_selection's X."),
    "n_selected": ("It is the number q of query rows at the end of every sequence in the "
                   "query layout: None learns it from X at fit; an int fixes it (unused "
                   "in the indicator layout)."),
    "lr_schedule": ("Pass 'constant' (Adam at lr throughout, the default) or 'cosine' (lr "
                    "decayed to 0 by a cosine over the fit's steps, stepped per batch)."),
    "pe_dim": "It is the positional-encoding dimension d_p, e.g. pe_dim=64.",
    "positional_encoding": ("'stochastic' draws fresh positions for every sequence and "
                            "predicts at any length."),
    "max_seq_len": "It is the number of positions a table encoding holds, e.g. max_seq_len=256.",
    "n_pe_draws": "It is the number of positional draws averaged over, e.g. n_pe_draws=8.",
    "output_map": "Pass True (a trainable map after the attention) or False (the paper's model).",
    "hidden_width": "It is the width m of every hidden layer, e.g. hidden_width=256.",
    "n_hidden_layers": "It is the number of hidden layers, e.g. n_hidden_layers=1.",
    # the architectures beyond the paper's two
    "d_model": ("It is the width of the encoder or the state-space model, the size of every "
                "position's vector, e.g. d_model=32."),
    "n_heads": "It is the number of attention heads; it must divide d_model, e.g. n_heads=2.",
    "n_layers": ("It is the number of layers (transformer blocks, recurrent layers), "
                 "e.g. n_layers=1."),
    "cell": "Pass 'gru', 'lstm' or 'rnn' (a tanh RNN).",
    "hidden_size": "It is the width of the recurrent state, e.g. hidden_size=32.",
    "d_state": "It is the state size N of every channel's selective scan, e.g. d_state=16.",
}


def validate(constraints, params, caller_name):
    """Check ``params`` against ``constraints``; raise with the fix added.

    Raises
    ------
    sklearn.utils._param_validation.InvalidParameterError
        Both a ValueError and a TypeError. The message is scikit-learn's
        ("The 'batch_size' parameter of SparseTokenFCN must be ... Got -5
        instead.") followed by the hint for that parameter.

    Examples
    --------
    >>> try:
    ...     validate(FCN, {"batch_size": 0}, "SparseTokenFCN")
    ... except ValueError as exc:
    ...     print(str(exc)[:64])
    The 'batch_size' parameter of SparseTokenFCN must be an int in t
    """
    for name, value in params.items():
        try:
            validate_parameter_constraints(constraints, {name: value}, caller_name)
        except InvalidParameterError as exc:
            hint = HINTS.get(name, "")
            hint = hint(value) if callable(hint) else hint
            raise InvalidParameterError(f"{exc} {hint}".rstrip()) from None


# -- what a change does to a fitted estimator -------------------------------------

#: plain name -> group; a name with "__" goes by its prefix (PREFIX_GROUPS)
GROUPS = {
    **dict.fromkeys(["module", "token_dim", "seq_len", "layout", "n_selected", "pe_dim",
                     "positional_encoding",
                     "max_seq_len", "output_map", "hidden_width", "n_hidden_layers",
                     # the architectures beyond the paper's two
                     "d_model", "n_heads", "n_layers", "cell", "hidden_size", "d_state"],
                    "structural"),
    **dict.fromkeys(["n_pe_draws", "device", "compile"], "applied"),
    **dict.fromkeys(["criterion", "optimizer", "lr", "max_epochs", "batch_size",
                     "iterator_train", "iterator_valid", "dataset", "train_split",
                     "callbacks", "predict_nonlinearity", "warm_start", "verbose",
                     "use_caching", "torch_load_kwargs", "random_state", "lr_schedule"],
                    "setting"),
    "_params_to_validate": "internal",
}
PREFIX_GROUPS = {
    "module": "structural",
    "compile": "applied",
    **dict.fromkeys(["criterion", "optimizer", "iterator_train", "iterator_valid",
                     "dataset", "callbacks"], "setting"),
}


def group_of(name):
    """The group of parameter ``name``: structural, applied, setting or internal.

    Raises KeyError for a name no rule covers, so that a new parameter
    cannot go unclassified.

    Examples
    --------
    >>> group_of("pe_dim"), group_of("n_pe_draws"), group_of("lr")
    ('structural', 'applied', 'setting')
    >>> group_of("module__pe_dim"), group_of("callbacks__print_log__floatfmt")
    ('structural', 'setting')
    """
    if "__" in name:
        return PREFIX_GROUPS[name.split("__", 1)[0]]
    return GROUPS[name]


def is_structural(name):
    """Whether changing ``name`` makes a fitted module no longer match.

    Unlike ``group_of``, a name no rule covers is simply not structural.
    """
    try:
        return group_of(name) == "structural"
    except KeyError:
        return False


# -- routed values, checked on scratch objects ------------------------------------


def _routed(net, prefix, overrides):
    kwargs = net.get_params_for(prefix)
    start = prefix + "__"
    kwargs.update({key[len(start):]: value for key, value in overrides.items()
                   if key.startswith(start)})
    return kwargs


def _refused(net, prefix, kwargs, component, exc):
    given = ", ".join(f"{prefix}__{key}={value!r}" for key, value in kwargs.items())
    name = getattr(component, "__name__", repr(component))
    return ValueError(
        f"{given} {'is' if len(kwargs) == 1 else 'are'} refused by {prefix}={name}: "
        f"{exc} Pass values {name} accepts (see its documentation), or leave "
        f"{prefix}__* unset for its defaults. Nothing was changed."
    )


def check_components(net, overrides=None, *, iterators=False):
    """Build the criterion and optimizer (and iterators) of ``net`` on scratch objects.

    The routed values (``criterion__*``, ``optimizer__*``, ``lr``, and with
    ``iterators`` also ``iterator_train__*`` / ``iterator_valid__*``) reach
    torch only when a fit builds them, after the module: a bad one would fail
    there. Building throwaway copies first refuses it before anything is
    changed. ``overrides`` are values about to be set (``set_params``),
    ``optimizer`` and ``criterion`` among them: routed values are checked
    against the classes they will reach.

    Raises
    ------
    ValueError
        Naming the routed values, the component that refused them and torch's
        reason.
    """
    from torch.utils.data import DataLoader, TensorDataset

    from ._batching import TensorBatches

    overrides = overrides or {}
    criterion_class = overrides.get("criterion", net.criterion)
    optimizer_class = overrides.get("optimizer", net.optimizer)
    kwargs = _routed(net, "criterion", overrides)
    try:
        criterion = criterion_class(**kwargs)
        if getattr(criterion_class, "__module__", "").startswith("torch.nn"):
            # torch's losses check ``reduction`` only when called
            criterion(torch.zeros(2, 1), torch.zeros(2, 1))
    except (TypeError, ValueError, RuntimeError) as exc:
        if kwargs:
            raise _refused(net, "criterion", kwargs, criterion_class, exc) from None
    kwargs = _routed(net, "optimizer", overrides)
    kwargs.pop("param_groups", None)  # skorch's, not the optimizer's
    try:
        optimizer_class([torch.zeros(1, requires_grad=True)],
                        **{"lr": overrides.get("lr", net.lr), **kwargs})
    except (TypeError, ValueError, RuntimeError) as exc:
        if not kwargs:
            raise ValueError(
                f"lr={overrides.get('lr', net.lr)!r} is refused by optimizer="
                f"{getattr(optimizer_class, '__name__', optimizer_class)}: {exc} Pass a "
                "learning rate it accepts, e.g. lr=0.01. Nothing was changed."
            ) from None
        raise _refused(net, "optimizer", kwargs, optimizer_class, exc) from None
    if not iterators:
        return
    scratch = TensorDataset(torch.zeros(2, 1), torch.zeros(2, 1))
    for prefix in ("iterator_train", "iterator_valid"):
        kwargs = _routed(net, prefix, overrides)
        iterator = getattr(net, prefix)
        try:
            built = iterator(scratch, **{"batch_size": 1, **kwargs})
            if isinstance(built, TensorBatches) and built.loader_kwargs:
                DataLoader(scratch, **built.loader_kwargs)  # what it hands them to
        except (TypeError, ValueError, RuntimeError) as exc:
            if kwargs:
                raise _refused(net, prefix, kwargs, iterator, exc) from None
