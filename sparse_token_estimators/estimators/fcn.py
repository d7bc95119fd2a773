"""The fully-connected ReLU net of the paper's lower bound as an estimator."""

import torch

from .. import _layout
from ..modules import FullyConnectedNet
from . import _docs, _rules
from ._base import _SparseTokenRegressor

__all__ = ["SparseTokenFCN"]


@_docs.compose
class SparseTokenFCN(_SparseTokenRegressor):
    """Fully-connected ReLU network for sparse token selection.

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.modules.FullyConnectedNet`: the flattened
    (T * (d + 1)) input, tokens and indicator together, goes through
    ``n_hidden_layers`` hidden layers of width m = ``hidden_width`` to a linear
    output in R^d. Wang, Wei, Hsu & Lee (ICML 2024) show that with first-layer
    width m <= T d - 1 every such net has expected loss at least
    (T - q) / (T q (T - 1)); it needs width of order T d. It has no notion of
    position and accepts only the sequence length it was fitted on.

    Parameters
    ----------
    module : torch module class, default=FullyConnectedNet
        Built with ``seq_len``, ``token_dim`` and the parameters below.
    seq_len : int or None, default=None
        Sequence length T, the only one the net accepts. None: learned from
        ``X`` at a fresh ``fit``. Given (with ``token_dim``): ``initialize()``
        builds the module without data, e.g. to load saved weights.
    token_dim : int or None, default=None
        Token dimension d; None: learned from ``X`` at a fresh ``fit``.
    hidden_width : int, default=256
        Width m of every hidden layer.
    n_hidden_layers : int, default=1
        Number of hidden layers.
    {layout}
        In the query layout the net sees the flattened (T + q)(d + 1) array.
    {n_selected}
    random_state : int, RandomState or None, default=None
        Seeds the initial weights and the shuffling.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`. The defaults are Adam,
        lr=0.003, batch_size=256 and 30 epochs: within 30 epochs narrow nets
        get further with lr=0.003 than with 0.001, and a net near width T d
        is still improving at the end.
    {device}
    {lr_schedule}

    Attributes
    ----------
    module_ : FullyConnectedNet
        The fitted module.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int
        Sequence length T the module was built with; the only one
        ``predict`` accepts.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    As for :class:`SparseTokenTransformer`: a changed structural parameter
    (``hidden_width``, ``n_hidden_layers``, ``seq_len``, ``token_dim``,
    ``module``, ``module__*``) makes a fitted estimator read as unfitted
    until it is refit or the value is set back; ``device`` and ``compile``
    are applied to the fitted module; the rest keep the fit. Saved weights
    load into ``SparseTokenFCN(hidden_width=..., seq_len=T, token_dim=d)
    .initialize()``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenFCN
    >>> X, y = make_sparse_selection(500, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenFCN(hidden_width=64, max_epochs=2, random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    """

    _parameter_rules = {
        **_SparseTokenRegressor._parameter_rules,
        "seq_len": [_rules.NONE, _rules.Count(1)],
        "hidden_width": _rules.POSITIVE,
        "n_hidden_layers": _rules.POSITIVE,
    }
    _module_params = ("hidden_width", "n_hidden_layers")
    _sizes = ("seq_len", "token_dim")
    _predict_block = 64

    def __init__(self, module=FullyConnectedNet, *, seq_len=None, token_dim=None,
                 hidden_width=256, n_hidden_layers=1, layout="indicator", n_selected=None,
                 random_state=None,
                 optimizer=torch.optim.Adam, lr=0.003, max_epochs=30, batch_size=256,
                 train_split=None, verbose=0, device="auto", lr_schedule="constant", **kwargs):
        super().__init__(
            module, token_dim=token_dim, layout=layout, n_selected=n_selected,
            random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, lr_schedule=lr_schedule, **kwargs,
        )
        self.seq_len = seq_len
        self.hidden_width = hidden_width
        self.n_hidden_layers = n_hidden_layers

    def _check_seq_len(self, seq_len, *, fitting):
        if not fitting and seq_len != self.seq_len_:
            raise ValueError(
                f"X has seq_len {seq_len}, but this SparseTokenFCN was fitted on "
                f"seq_len {self.seq_len_}: a fully-connected net has one input "
                "unit per position and no notion of length, so it only accepts "
                "the length it was fitted on. Use SparseTokenTransformer for "
                "other lengths."
            )

    def _module_kwargs(self):
        # the query layout's q rows come after the T tokens: T + q rows flattened
        rows = self.seq_len_ + _layout.query_rows(self.layout, self.n_selected_)
        return {**super()._module_kwargs(), "seq_len": rows, "token_dim": self.token_dim_}

    @property
    def predict_attention(self):
        # absent (hasattr is False), with the reason, rather than a generic AttributeError
        raise AttributeError(
            "SparseTokenFCN has no predict_attention: a fully-connected net has no attention "
            "weights over the positions. SparseTokenTransformer and SparseTokenEncoder offer "
            "predict_attention."
        )
