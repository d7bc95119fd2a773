"""Bridge to scikit-learn's 2-D estimators."""

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._layout import check_tokens, count_queries

#: tensor dtypes whose numpy view ``check_tokens`` may hand back unchanged
_VIEWED = (torch.float32,)


class FlattenTokens(TransformerMixin, BaseEstimator):
    """Flatten (n_samples, seq_len, token_dim + 1) into (n_samples, seq_len * (token_dim + 1)).

    Puts any scikit-learn regressor (Ridge, MLPRegressor, ...) in a pipeline on
    the sparse token selection task, tokens and indicator together, like the
    fully-connected net sees them. ``inverse_transform`` is the way back to
    the 3-D layout the package's estimators take.

    Examples
    --------
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.pipeline import make_pipeline
    >>> from sparse_token_estimators import make_sparse_selection, FlattenTokens
    >>> X, y = make_sparse_selection(200, seq_len=10, token_dim=4, random_state=0)
    >>> FlattenTokens().fit_transform(X).shape
    (200, 50)
    >>> make_pipeline(FlattenTokens(), Ridge()).fit(X, y).predict(X[:2]).shape
    (2, 4)
    >>> X_query, _ = make_sparse_selection(200, seq_len=10, token_dim=4, n_selected=3,
    ...                                    layout="query", random_state=0)
    >>> FlattenTokens(layout="query").fit_transform(X_query).shape
    (200, 65)

    Parameters
    ----------
    layout : {"indicator", "query"}, default="indicator"
        The layout of ``X`` whose rules are checked (``make_sparse_selection``);
        both flatten the same way, every row's channels side by side.
    n_selected : int or None, default=None
        Query layout only: the number of query rows; None learns it at fit.
    """

    def __init__(self, layout="indicator", n_selected=None):
        self.layout = layout
        self.n_selected = n_selected

    def _query_rows(self):
        return self.n_selected_ if self.layout == "query" else 0

    def fit(self, X, y=None):
        """Learn ``seq_len`` and ``token_dim`` from ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens with the selection indicator as the last channel.
        y : None
            Ignored; present for the pipeline API.

        Returns
        -------
        self : FlattenTokens
        """
        X = check_tokens(X, layout=self.layout, n_selected=self.n_selected)
        query = self.layout == "query"
        self.n_selected_ = (count_queries(X) if self.n_selected is None else
                            self.n_selected) if query else None
        self.n_features_in_ = X.shape[-1]
        self.seq_len_ = X.shape[1] - (self.n_selected_ if query else 0)
        return self

    def transform(self, X):
        """Flatten ``X`` to one row per sequence, tokens and indicator together.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Sequences of the ``seq_len`` and ``token_dim`` seen in ``fit``.

        Returns
        -------
        X_flat : ndarray of shape (n_samples, seq_len * (token_dim + 1)), float32
            Row i holds the channels of position 0, then of position 1, ...
            of sequence i (see ``get_feature_names_out``). A new array: writing
            into it leaves ``X`` unchanged.
        """
        check_is_fitted(self)
        given = X
        X = check_tokens(X, token_dim=self.n_features_in_ - 1, layout=self.layout,
                         n_selected=self.n_selected_)
        if X.shape[1] - self._query_rows() != self.seq_len_:
            raise ValueError(
                f"X has seq_len {X.shape[1] - self._query_rows()} but FlattenTokens was "
                "fitted on seq_len "
                f"{self.seq_len_}; the flattened width would change and the "
                "downstream estimator would not accept it. Fit the pipeline on "
                "sequences of this length, or use SparseTokenTransformer, which "
                "takes any length."
            )
        flat = X.reshape(X.shape[0], -1)  # (n, T, d + 1) -> (n, T (d + 1))
        if hasattr(given, "detach"):  # a CPU tensor's numpy view shares its memory
            given = given.detach().cpu().numpy() if given.dtype in _VIEWED else None
        if isinstance(given, np.ndarray) and np.may_share_memory(flat, given):
            flat = flat.copy()
        return flat

    def inverse_transform(self, X):
        """Put a flattened table back into the 3-D layout: the inverse of ``transform``.

        The public way back from the 2-D layout, e.g. for a table stored
        flattened that an estimator of the package should read.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len * (token_dim + 1))
            Rows as ``transform`` writes them (a pandas DataFrame too).

        Returns
        -------
        X_3d : ndarray of shape (n_samples, seq_len, token_dim + 1), float32
            Checked as the estimators check their input (finite, a 0/1 indicator).

        Examples
        --------
        >>> import numpy as np
        >>> from sparse_token_estimators import make_sparse_selection, FlattenTokens
        >>> X, _ = make_sparse_selection(5, seq_len=10, token_dim=4, random_state=0)
        >>> flatten = FlattenTokens().fit(X)
        >>> np.array_equal(flatten.inverse_transform(flatten.transform(X)), X)
        True
        """
        check_is_fitted(self)
        if hasattr(X, "to_numpy"):
            X = X.to_numpy()
        X = np.asarray(X.detach().cpu() if hasattr(X, "detach") else X)
        width = self.seq_len_ * self.n_features_in_
        if X.ndim != 2 or X.shape[1] != width:
            raise ValueError(
                f"FlattenTokens.inverse_transform takes a 2-D table of shape (n_samples, "
                f"{width}) (seq_len * (token_dim + 1) = {self.seq_len_} * "
                f"{self.n_features_in_}, as fitted); got shape {X.shape}. Pass rows written "
                "by transform of a FlattenTokens fitted on sequences of this size."
            )
        return check_tokens(X.reshape(len(X), self.seq_len_, self.n_features_in_),
                            token_dim=self.n_features_in_ - 1)

    def get_feature_names_out(self, input_features=None):
        """Names of the flattened columns: ``t{position}_x{channel}`` and ``t{position}_selected``.

        Parameters
        ----------
        input_features : None
            Ignored; present for scikit-learn's API.

        Returns
        -------
        names : list of str of length seq_len * (token_dim + 1)
        """
        check_is_fitted(self)
        channels = [f"x{j}" for j in range(self.n_features_in_ - 1)] + ["selected"]
        if self.layout == "query":  # tokens t{i}_x{c}, t{i}_selected (0), query q{j}_...
            tokens = [f"t{t}_{c}" for t in range(self.seq_len_) for c in channels[:-1]
                      + ["zero"]]
            return tokens + [f"q{j}_{c}" for j in range(self.n_selected_)
                             for c in channels[:-1] + ["position"]]
        return [f"t{t}_{c}" for t in range(self.seq_len_) for c in channels]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.transformer_tags.preserves_dtype = ["float32"]  # the layout's dtype
        return tags
