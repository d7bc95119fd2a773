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
from ._layout import check_target, check_tokens, count_queries
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
            X = check_tokens(X, token_dim=self.token_dim_ if continues else None,
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
        X = check_tokens(X, token_dim=self.token_dim_,
                         **self._layout_rules(self.n_selected_ if query else None))
        self._check_seq_len(X.shape[1] - (self.n_selected_ if query else 0), fitting=False)
        return X

