"""What the estimators check before they build or predict anything.

One mixin, :class:`InputChecksMixin`, of the estimators' base class: the
parameters (``_params``' rules and skorch's check of routed names), the routed
values (tried on scratch objects), the keywords of ``fit``, the training data
or stream, and the input of a prediction. Each check raises with the argument,
the value and the fix; none writes to the estimator.
"""

import inspect

import numpy as np
import torch
from skorch.dataset import ValidSplit
from skorch.utils import is_dataset

from . import _device, _params
from ._batching import TensorBatches
from ._device import resolve_device
from ._layout import LAYOUT, check_target, check_tokens, count_queries
from .datasets import SparseSelectionStream


class InputChecksMixin:
    """The checks run before anything is built (``fit``) or read (``predict``).

    A subclass says which lengths it accepts by overriding ``_check_seq_len``.
    """

    def _check_params(self, names=None):
        """Validate the parameters (all, or those in ``names``) before they are used.

        The rules are ``_parameter_constraints`` (from ``_params``), checked
        by scikit-learn's own parameter validation; skorch's check of routed
        ``prefix__name`` arguments and the routed values themselves (on
        scratch objects) run here too, before anything is built.
        """
        params = self.get_params(deep=False)
        if names is not None:
            params = {name: params[name] for name in names if name in params}
        _params.validate(self._parameter_constraints, params, type(self).__name__)
        if names is None:
            self._check_routed_names()
            self._check_module_kwargs()
            _params.check_components(self, iterators=True)
        if "device" in params:
            resolve_device(self.__dict__["device"])  # an absent GPU is a fact of the machine
        if torch.get_default_dtype() != torch.float32:
            raise TypeError(
                f"torch's default dtype is {torch.get_default_dtype()} (set by "
                f"torch.set_default_dtype), but {type(self).__name__} builds and runs "
                "its module in float32, the dtype X is cast to. Call "
                "torch.set_default_dtype(torch.float32) before fit and predict (set it "
                "back after, if other code needs float64)."
            )

    def _check_module_kwargs(self):
        """Refuse ``module__<name>`` values the module's ``__init__`` does not take."""
        module = self.module if isinstance(self.module, type) else None
        routed = self.get_params_for("module")
        if module is None or not routed:
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
            supplied = [*self._module_params, "token_dim", "seq_len", "eval_seed"]
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

    def _check_routed_names(self):
        # skorch's check of prefix__name arguments, before anything is built.
        # skorch learns the component prefixes (module, criterion, optimizer)
        # as it builds them and has no public check: name them for its private one.
        had = "prefixes_" in self.__dict__
        saved = self.__dict__.get("prefixes_")
        components = ["module", "criterion", "optimizer"]
        self.__dict__["prefixes_"] = [*self.prefixes_, *(c for c in components
                                                         if c not in self.prefixes_)]
        try:
            super()._validate_params()
        finally:
            if had:
                self.__dict__["prefixes_"] = saved
            else:
                del self.__dict__["prefixes_"]

    def _check_fit_params(self, fit_params, method):
        """Refuse fit keywords that the module's forward does not take."""
        if "sample_weight" in fit_params:
            raise TypeError(
                f"{type(self).__name__}.{method} does not support sample_weight: it "
                "minimises the squared error with every sequence weighted equally. To "
                "weight sequences, repeat them (integer weights: "
                "np.repeat(X, w, axis=0) with np.repeat(y, w, axis=0)) or resample X "
                "and y with probabilities proportional to the weights."
            )
        module = self.module if isinstance(self.module, type) else type(self.module)
        forward = inspect.signature(module.forward).parameters
        if any(p.kind is p.VAR_KEYWORD for p in forward.values()):
            return
        accepted = set(list(forward)[2:]) - set(self._forward_args_supplied)
        unknown = sorted(set(fit_params) - accepted)
        if unknown:
            raise TypeError(
                f"{type(self).__name__}.{method} got the keyword argument(s) "
                f"{', '.join(unknown)}, which {module.__name__}.forward does not take "
                f"(it takes {', '.join(sorted(accepted)) or 'none'}). Keywords of fit "
                "go to the module's forward; pass X and y alone."
            )

    def _check_training_data(self, X, y, *, continues):
        """Validate the training data against the parameters; return it and its sizes."""
        if isinstance(X, SparseSelectionStream):
            self._check_stream(X, y)
            self._check_stream_layout(X, continues)
            token_dim, seq_len, where = X.token_dim, X.seq_len, "the stream"
            n_selected = X.n_selected if self.layout == "query" else None
            if continues and token_dim != self.token_dim_:
                raise ValueError(
                    f"The stream has token_dim {token_dim}, but the estimator was "
                    f"fitted with token_dim {self.token_dim_}. Continue on a stream "
                    "with the token_dim seen in fit."
                )
        else:
            n_selected = self._n_selected_to_check(continues)
            X = self._check_tokens(X, token_dim=self.token_dim_ if continues else None,
                                   **self._layout_rules(n_selected))
            y = check_target(y, X)
            if self.layout == "query" and n_selected is None:
                n_selected = count_queries(X)  # learned, as token_dim is
            token_dim, seq_len, where = (X.shape[2] - 1, X.shape[1] - (n_selected or 0),
                                         f"X of shape {X.shape}")
        if continues:
            self._check_seq_len(seq_len, fitting=False)
        else:
            for name, value in (("token_dim", token_dim), ("seq_len", seq_len)):
                given = getattr(self, name, None)
                if given is not None and given != value:
                    raise ValueError(
                        f"{where} has {name} {value}, but {type(self).__name__} was "
                        f"given {name}={given}. Set {name}=None to learn it from the "
                        f"data, or pass data with {name} {given}."
                    )
            self._check_seq_len(seq_len, fitting=True)
        return X, y, (token_dim, seq_len, n_selected)

    def _layout_rules(self, n_selected):
        """``check_tokens``' layout keywords (none in the default indicator layout)."""
        if self.layout != "query":
            return {}
        return {"layout": "query", "n_selected": n_selected}

    def _n_selected_to_check(self, continues):
        """The query rows' count X must have: fitted, given, or None (learned)."""
        if self.layout != "query":
            return None
        return self.n_selected_ if continues else self.n_selected

    def _check_stream_layout(self, stream, continues):
        if stream.layout != self.layout:
            raise ValueError(
                f"The stream draws the {stream.layout} layout, but {type(self).__name__} "
                f"was given layout={self.layout!r}. Make the stream with "
                f"layout={self.layout!r}, or set layout={stream.layout!r}."
            )
        expected = self._n_selected_to_check(continues)
        if expected is not None and stream.n_selected != expected:
            raise ValueError(
                f"The stream has n_selected {stream.n_selected}, but "
                f"{type(self).__name__} {'was fitted with' if continues else 'was given'} "
                f"n_selected={expected}: in the query layout it is the number of query "
                f"rows. Make the stream with n_selected={expected}, or set "
                "n_selected=None to learn it."
            )

    def _check_stream(self, stream, y):
        if y is not None:
            raise ValueError(
                "y must be None when X is a SparseSelectionStream: the stream draws "
                "the targets with the sequences. Call fit(stream)."
            )
        if isinstance(self.train_split, ValidSplit):
            raise ValueError(
                f"train_split={type(self.train_split).__name__}(...) splits a fixed "
                "dataset and cannot "
                "split a stream of fresh samples. Use train_split=None, and score the "
                "fitted estimator on held-out data from make_sparse_selection."
            )
        if not (isinstance(self.iterator_train, type)
                and issubclass(self.iterator_train, TensorBatches)):
            raise ValueError(
                f"iterator_train={self.iterator_train!r} cannot draw a stream's "
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
        requested = self.__dict__["device"]
        ours = resolve_device(requested)
        if ours is not None and not _device.same_device(resolve_device(stream.device), ours):
            raise ValueError(
                f"The stream draws on {stream.device!r} ({resolve_device(stream.device)}) "
                f"but {type(self).__name__} trains on {requested!r} ({ours}): every "
                f"batch would be copied. Make the stream with device={requested!r}."
            )

    def _check_tokens(self, X, *, token_dim, **rules):
        """``check_tokens``, with the estimator's sizes in the messages of two mistakes."""
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
            sizes = {name: getattr(self, name, None) or self.__dict__.get(name + "_")
                     for name in ("seq_len", "token_dim")}
            table = hasattr(X, "columns") and hasattr(X, "to_numpy")  # a pandas DataFrame
            raise ValueError(flat_table_message(tuple(shape), **sizes, table=table))
        return check_tokens(X, token_dim=token_dim, **rules)

    def _check_seq_len(self, seq_len, *, fitting):
        """Raise if this estimator cannot take sequences of ``seq_len``."""

    def _check_X(self, X):
        """Check that the estimator is fitted and ``X`` fits it; return ``X``."""
        if isinstance(X, SparseSelectionStream):
            raise TypeError(
                "A SparseSelectionStream is for training; predict and score take an "
                "array X of shape (n_samples, seq_len, token_dim + 1). Draw held-out "
                "data with make_sparse_selection(n_samples, seq_len, token_dim, "
                "n_selected, random_state=...)."
            )
        self._check_fitted()
        self._check_params(_params.PREDICTION)
        if is_dataset(X):  # skorch's validation split (EpochScoring), checked at fit
            return X
        query = self.layout == "query"
        X = self._check_tokens(X, token_dim=self.token_dim_,
                               **self._layout_rules(self.n_selected_ if query else None))
        self._check_seq_len(X.shape[1] - (self.n_selected_ if query else 0), fitting=False)
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
            f"X must be a numeric array of shape {LAYOUT}, every sequence of one length; it "
            f"is a list of {len(X)} sequences of different lengths ({lengths}). Predict each "
            "length separately: group the sequences by length and call predict on "
            "np.stack(group) for each group."
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
    head = (f"X must be a 3-D array of shape {LAYOUT}, as returned by make_sparse_selection; "
            f"got an array of shape {shape}.")
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
