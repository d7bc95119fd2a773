"""What the estimators check before they build or predict anything: plain functions.

Each takes the estimator (``net``) and what to check, raises with the argument,
the value and the fix, and writes nothing. The base class calls them from the
start of ``fit``, ``partial_fit``, ``initialize`` and ``predict``; the rules of
the parameters are in ``_rules``, the data contract in ``.._layout``.
"""

import functools
import inspect

import numpy as np
import torch
from skorch.dataset import ValidSplit
from skorch.utils import is_dataset

from .. import _device, _layout
from .._batching import TensorBatches
from .._device import resolve_device
from ..datasets import SparseSelectionStream
from . import _rules, _state

#: the components skorch learns the prefixes of only as it builds them
_COMPONENTS = ("module", "criterion", "optimizer")


def check_params(net, names=None):
    """Validate the parameters (all, or those in ``names``) before they are used.

    With ``names`` None, the routed ``prefix__name`` arguments (their names and,
    on scratch objects, their values) and the module's own arguments are checked too.
    """
    params = net.get_params(deep=False)
    if names is not None:
        params = {name: params[name] for name in names if name in params}
    _rules.validate(net._parameter_rules, params, type(net).__name__)
    if names is None:
        check_routed_names(net)
        check_module_kwargs(net)
        check_components(net, iterators=True)
        net._check_sizes()
    if "device" in params:
        resolve_device(net.__dict__["device"])  # an absent GPU is a fact of the machine
    if torch.get_default_dtype() != torch.float32:
        raise TypeError(
            f"torch's default dtype is {torch.get_default_dtype()} (set by "
            f"torch.set_default_dtype), but {type(net).__name__} builds and runs "
            "its module in float32, the dtype X is cast to. Call "
            "torch.set_default_dtype(torch.float32) before fit and predict (set it "
            "back after, if other code needs float64)."
        )


def check_routed_names(net):
    """skorch's check of argument names (typos, a missing ``__``), before anything is built."""
    known = _init_parameters(type(net))
    prefixes = sorted({*net.prefixes_, *_COMPONENTS}, key=lambda s: (-len(s), s))
    unexpected, missing_dunder = [], []
    for key in sorted(net.get_params(deep=False)):
        if key in known or key.startswith("_") or hasattr(type(net), key):
            continue  # a parameter, skorch's bookkeeping, or a method patched on the instance
        prefix = next((p for p in prefixes if key.startswith(p)), None)
        if prefix is None:
            unexpected.append(key)
        elif key != prefix and not key.startswith(prefix + "__"):
            missing_dunder.append((prefix, key))
    messages = []
    if unexpected:
        messages.append(
            f"__init__() got unexpected argument(s) {', '.join(unexpected)}. Either you made a "
            "typo, or you added new arguments in a subclass; if that is the case, the "
            "subclass should deal with the new arguments explicitly.")
    messages += [f"Got an unexpected argument {key}, did you mean "
                 f"{prefix}__{key[len(prefix):].lstrip('_')}?" for prefix, key in missing_dunder]
    if messages:
        raise ValueError("\n".join(messages))


@functools.lru_cache(maxsize=None)
def _init_parameters(cls):
    """The names every ``__init__`` of ``cls``'s classes takes (read once per class)."""
    return frozenset(name for klass in cls.__mro__
                     if "__init__" in vars(klass) and klass is not object
                     for name in inspect.signature(vars(klass)["__init__"]).parameters)


def check_module_kwargs(net):
    """Refuse ``module__<name>`` values the module does not take or that contradict a size.

    A ``module__<name>`` the estimator passes itself from a top-level parameter
    (``module__pe_dim`` beside ``pe_dim``) must equal it: the top-level
    parameter is the one source of the module's sizes.
    """
    routed = net.get_params_for("module")
    if not routed:
        return
    for name, value in routed.items():
        own = getattr(net, name, None) if name in net._module_params else None
        if name in net._module_params and not _state._same(value, own):
            raise ValueError(
                f"module__{name}={value!r} contradicts {name}={own!r}: the estimator builds "
                f"its module with {name} from its own parameter. Set {name}={value!r} "
                f"instead (e.g. set_params({name}={value!r})) and leave module__{name} "
                "unset. Nothing was built or changed.")
    module = net.module if isinstance(net.module, type) else None
    if module is None:
        return
    try:
        accepted = inspect.signature(module.__init__).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        return
    unknown = sorted(set(routed) - set(accepted))
    if unknown:
        given = ", ".join(f"module__{name}={routed[name]!r}" for name in unknown)
        supplied = [*net._module_params, "token_dim", "seq_len", "eval_seed"]
        passed = [name for name in supplied if name in accepted]
        own = [name for name in accepted if name != "self" and name not in supplied]
        takes = (", ".join(f"module__{name}" for name in own) if own
                 else "no argument beyond those")
        raise TypeError(
            f"{given}: {module.__name__} takes no argument "
            f"{' or '.join(repr(name) for name in unknown)}. The estimator passes "
            f"{', '.join(passed)} itself (from its parameters and the fitted sizes); "
            f"the module takes {takes}. Construct the estimator without "
            f"{', '.join(f'module__{name}' for name in unknown)}, or pass a module class "
            "that takes it. Nothing was built or changed."
        )


def check_fit_params(net, fit_params, method):
    """Refuse fit keywords that the module's forward does not take."""
    if "sample_weight" in fit_params:
        raise TypeError(
            f"{type(net).__name__}.{method} does not support sample_weight: it "
            "minimises the squared error with every sequence weighted equally. To "
            "weight sequences, repeat them (integer weights: "
            "np.repeat(X, w, axis=0) with np.repeat(y, w, axis=0)) or resample X "
            "and y with probabilities proportional to the weights."
        )
    module = net.module if isinstance(net.module, type) else type(net.module)
    forward = inspect.signature(module.forward).parameters
    if any(p.kind is p.VAR_KEYWORD for p in forward.values()):
        return
    accepted = set(list(forward)[2:]) - set(net._forward_args_supplied)
    unknown = sorted(set(fit_params) - accepted)
    if unknown:
        raise TypeError(
            f"{type(net).__name__}.{method} got the keyword argument(s) "
            f"{', '.join(unknown)}, which {module.__name__}.forward does not take "
            f"(it takes {', '.join(sorted(accepted)) or 'none'}). Keywords of fit "
            "go to the module's forward; pass X and y alone."
        )


def check_training_data(net, X, y, *, continues):
    """Validate the training data against the parameters; return it and its sizes.

    The sizes are ``(token_dim, seq_len, n_selected)``: those of the data, which
    a fresh fit builds the module with (braindecode's ``_set_signal_args``).
    """
    if isinstance(X, SparseSelectionStream):
        check_stream(net, X, y, continues)
        token_dim, seq_len, where = X.token_dim, X.seq_len, "the stream"
        n_selected = X.n_selected if _layout.has_query_rows(net.layout) else None
        if continues and token_dim != net.token_dim_:
            raise ValueError(
                f"The stream has token_dim {token_dim}, but the estimator was "
                f"fitted with token_dim {net.token_dim_}. Continue on a stream "
                "with the token_dim seen in fit."
            )
    else:
        n_selected = _n_selected_to_check(net, continues)
        X = check_tokens(net, X, token_dim=net.token_dim_ if continues else None,
                         **_layout.layout_rules(net.layout, n_selected))
        y = _layout.check_target(y, X)
        if _layout.has_query_rows(net.layout) and n_selected is None:
            n_selected = _layout.count_queries(X)  # learned, as token_dim is
        token_dim, where = X.shape[2] - 1, f"X of shape {X.shape}"
        seq_len = X.shape[1] - _layout.query_rows(net.layout, n_selected)
    if continues:
        net._check_seq_len(seq_len, fitting=False)
    else:
        for name, value in (("token_dim", token_dim), ("seq_len", seq_len)):
            given = getattr(net, name, None)
            if given is not None and given != value:
                raise ValueError(
                    f"{where} has {name} {value}, but {type(net).__name__} was "
                    f"given {name}={given}. Set {name}=None to learn it from the "
                    f"data, or pass data with {name} {given}."
                )
        net._check_seq_len(seq_len, fitting=True)
    return X, y, (token_dim, seq_len, n_selected)


def _n_selected_to_check(net, continues):
    """The query rows' count X must have: fitted, given, or None (learned)."""
    if not _layout.has_query_rows(net.layout):
        return None
    return net.n_selected_ if continues else net.n_selected


def check_stream(net, stream, y, continues):
    """Refuse a stream this estimator cannot train on, saying what to change."""
    if y is not None:
        raise ValueError(
            "y must be None when X is a SparseSelectionStream: the stream draws "
            "the targets with the sequences. Call fit(stream)."
        )
    if isinstance(net.train_split, ValidSplit):
        raise ValueError(
            f"train_split={type(net.train_split).__name__}(...) splits a fixed "
            "dataset and cannot split a stream of fresh samples. Use train_split=None, "
            "and score the fitted estimator on held-out data from make_sparse_selection."
        )
    if not (isinstance(net.iterator_train, type)
            and issubclass(net.iterator_train, TensorBatches)):
        raise ValueError(
            f"iterator_train={net.iterator_train!r} cannot draw a stream's "
            "fresh batches; fit on a SparseSelectionStream with the default "
            "iterator_train=TensorBatches."
        )
    seed = stream.random_state
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        try:
            np.random.SeedSequence(int(seed))
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"The stream's random_state={seed!r} is not a seed numpy accepts "
                f"({exc}). Make the stream with random_state a non-negative int, a "
                "numpy RandomState or Generator, or None."
            ) from None
    requested = net.__dict__["device"]
    ours = resolve_device(requested)
    if ours is not None and not _device.same_device(resolve_device(stream.device), ours):
        raise ValueError(
            f"The stream draws on {stream.device!r} ({resolve_device(stream.device)}) "
            f"but {type(net).__name__} trains on {requested!r} ({ours}): every "
            f"batch would be copied. Make the stream with device={requested!r}."
        )
    if stream.layout != net.layout:
        raise ValueError(
            f"The stream draws the {stream.layout} layout, but {type(net).__name__} "
            f"was given layout={net.layout!r}. Make the stream with "
            f"layout={net.layout!r}, or set layout={stream.layout!r}."
        )
    expected = _n_selected_to_check(net, continues)
    if expected is not None and stream.n_selected != expected:
        raise ValueError(
            f"The stream has n_selected {stream.n_selected}, but "
            f"{type(net).__name__} {'was fitted with' if continues else 'was given'} "
            f"n_selected={expected}: in the query layout it is the number of query "
            f"rows. Make the stream with n_selected={expected}, or set "
            "n_selected=None to learn it."
        )


def check_tokens(net, X, *, token_dim, **rules):
    """``_layout.check_tokens``, with the estimator's sizes in the messages of two mistakes."""
    check_lengths(X)
    shape = None
    if isinstance(X, np.ndarray) or hasattr(X, "detach") or hasattr(X, "to_numpy"):
        shape = X.shape  # an array, tensor or DataFrame (a sparse matrix: check_tokens)
    elif isinstance(X, (list, tuple)):
        try:
            shape = np.shape(X)
        except ValueError:  # ragged deeper down: check_tokens says so
            pass
    if shape is not None and len(shape) == 2:
        sizes = {name: getattr(net, name, None) or net.__dict__.get(name + "_")
                 for name in ("seq_len", "token_dim")}
        table = hasattr(X, "columns") and hasattr(X, "to_numpy")  # a pandas DataFrame
        raise ValueError(flat_table_message(tuple(shape), **sizes, table=table))
    return _layout.check_tokens(X, token_dim=token_dim, **rules)


def check_X(net, X):
    """Check that ``net`` is fitted and ``X`` fits it; return ``X`` (for predict, score)."""
    if isinstance(X, SparseSelectionStream):
        raise TypeError(
            "A SparseSelectionStream is for training; predict and score take an "
            "array X of shape (n_samples, seq_len, token_dim + 1). Draw held-out "
            "data with make_sparse_selection(n_samples, seq_len, token_dim, "
            "n_selected, random_state=...)."
        )
    _state.check_fitted(net)
    check_params(net, _rules.PREDICTION)
    if is_dataset(X):  # skorch's validation split (EpochScoring), checked at fit
        return X
    X = check_tokens(net, X, token_dim=net.token_dim_,
                     **_layout.layout_rules(net.layout, net.n_selected_))
    net._check_seq_len(X.shape[1] - _layout.query_rows(net.layout, net.n_selected_),
                      fitting=False)
    return X


def check_lengths(X):
    """Refuse a list of sequences of different lengths, saying what to do."""
    if not isinstance(X, (list, tuple)) or len(X) < 2:
        return
    lengths = []
    for sequence in X:
        try:
            lengths.append(len(sequence))
        except TypeError:
            return  # not a list of sequences: check_tokens says what it is
    if len(set(lengths)) > 1:
        shown = sorted(set(lengths))
        lengths = ", ".join(map(str, shown[:5])) + (", ..." if len(shown) > 5 else "")
        raise ValueError(
            f"X must be a numeric array of shape {_layout.LAYOUT}, every sequence of one "
            f"length; it is a list of {len(X)} sequences of different lengths ({lengths}). "
            "Predict each length separately: group the sequences by length and call "
            "predict on np.stack(group) for each group."
        )


def flat_table_message(shape, seq_len=None, token_dim=None, table=False):
    """What to say about a 2-D ``X`` of ``shape`` (``table``: a pandas DataFrame).

    A flattened table (one sequence per row, as ``FlattenTokens`` writes it)
    and a single sequence (one position per row) are both 2-D; the sizes the
    estimator knows (``seq_len``, ``token_dim``) say which it is, where they can.
    """
    n, width = shape
    what = "pandas DataFrame" if table else "array"
    values = "X.to_numpy()" if table else "X"
    head = (f"X must be a 3-D array of shape {_layout.LAYOUT}, as returned by "
            f"make_sparse_selection; got an array of shape {shape}.")
    channels = None if token_dim is None else token_dim + 1
    single = f"a single sequence of shape (seq_len, token_dim + 1) needs a leading axis: " \
             f"{values}[np.newaxis]"
    if channels is not None and width == channels and not table:
        return f"{head} It looks like {single}."
    if seq_len is not None and channels is not None and width == seq_len * channels:
        reshape, exact = f"{values}.reshape({n}, {seq_len}, {channels})", True
    elif channels is not None and width % channels == 0:
        reshape, exact = f"{values}.reshape({n}, {width // channels}, {channels})", False
    else:
        reshape, exact = f"{values}.reshape(n_samples, seq_len, token_dim + 1)", False
    flattened = (f"A flattened {what} of shape (n_samples, seq_len * (token_dim + 1)), one "
                 "sequence per row with the channels of each position side by side (as "
                 f"FlattenTokens writes it), needs {reshape} (see the data layout page of the "
                 "user guide), or the inverse_transform of the FlattenTokens that flattened it")
    if exact or table:
        return f"{head} {flattened}."
    return f"{head} {flattened}; {single}."


# -- routed values, checked on scratch objects ------------------------------------


def _routed(net, prefix, overrides):
    kwargs = net.get_params_for(prefix)
    start = prefix + "__"
    kwargs.update({key[len(start):]: value for key, value in overrides.items()
                   if key.startswith(start)})
    return kwargs


def _refused(prefix, kwargs, component, exc):
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
    ``optimizer`` and ``criterion`` among them.

    Raises
    ------
    ValueError
        Naming the routed values, the component that refused them and torch's
        reason.
    """
    from torch.utils.data import DataLoader, TensorDataset

    overrides = overrides or {}
    criterion_class = overrides.get("criterion", net.criterion)
    optimizer_class = overrides.get("optimizer", net.optimizer)
    kwargs = _routed(net, "criterion", overrides)
    try:
        if kwargs:  # without routed values a failure is the fit's to report
            criterion = criterion_class(**kwargs)
            if getattr(criterion_class, "__module__", "").startswith("torch.nn"):
                # torch's losses check ``reduction`` only when called
                criterion(torch.zeros(2, 1), torch.zeros(2, 1))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise _refused("criterion", kwargs, criterion_class, exc) from None
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
        raise _refused("optimizer", kwargs, optimizer_class, exc) from None
    if not iterators:
        return
    scratch = TensorDataset(torch.zeros(2, 1), torch.zeros(2, 1))
    for prefix in ("iterator_train", "iterator_valid"):
        kwargs = _routed(net, prefix, overrides)
        if not kwargs:
            continue
        iterator = getattr(net, prefix)
        try:
            built = iterator(scratch, **{"batch_size": 1, **kwargs})
            if isinstance(built, TensorBatches) and built.loader_kwargs:
                DataLoader(scratch, **built.loader_kwargs)  # what it hands them to
        except (TypeError, ValueError, RuntimeError) as exc:
            raise _refused(prefix, kwargs, iterator, exc) from None
