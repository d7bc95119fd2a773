"""Bridge to scikit-learn's 2-D estimators."""

from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ._layout import check_tokens


class FlattenTokens(TransformerMixin, BaseEstimator):
    """Flatten (n_samples, seq_len, token_dim + 1) into (n_samples, seq_len * (token_dim + 1)).

    Puts any scikit-learn regressor (Ridge, MLPRegressor, ...) in a pipeline on
    the sparse token selection task, tokens and indicator together, like the
    fully-connected net sees them.

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
    """

    def fit(self, X, y=None):
        X = check_tokens(X)
        self.n_features_in_ = X.shape[-1]
        self.seq_len_ = X.shape[1]
        return self

    def transform(self, X):
        check_is_fitted(self)
        X = check_tokens(X, token_dim=self.n_features_in_ - 1)
        if X.shape[1] != self.seq_len_:
            raise ValueError(
                f"X has seq_len {X.shape[1]} but FlattenTokens was fitted on seq_len "
                f"{self.seq_len_}; the flattened width would change and the "
                "downstream estimator would not accept it. Fit the pipeline on "
                "sequences of this length, or use SparseTokenTransformer, which "
                "takes any length."
            )
        return X.reshape(X.shape[0], -1)

    def get_feature_names_out(self, input_features=None):
        check_is_fitted(self)
        channels = [f"x{j}" for j in range(self.n_features_in_ - 1)] + ["selected"]
        return [f"t{t}_{c}" for t in range(self.seq_len_) for c in channels]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True
        tags.input_tags.two_d_array = False
        tags.transformer_tags.preserves_dtype = ["float32"]  # the layout's dtype
        return tags
