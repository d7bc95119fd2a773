"""A recurrent net, GRU, LSTM or tanh RNN (beyond the paper), as an estimator."""

import torch

from ..architectures import CELLS, RecurrentNet
from . import _docs, _rules
from ._base import _SparseTokenRegressor

__all__ = ["SparseTokenRNN"]


@_docs.compose
class SparseTokenRNN(_SparseTokenRegressor):
    """A recurrent net for sparse token selection (beyond the paper).

    A scikit-learn regressor (a skorch ``NeuralNetRegressor``) wrapping
    :class:`~sparse_token_estimators.architectures.RecurrentNet`: a GRU,
    LSTM or tanh RNN reads the sequence token by token, token and indicator
    at each step, and a linear map of its last hidden state is the
    prediction. Its width is ``hidden_size``; it takes any length, but has
    seen only the training one. Recurrent nets are the other side of the
    separations of Sanford, Hsu & Telgarsky (NeurIPS 2023) and
    Bhattamishra et al. (NeurIPS 2024). It has no attention, so no
    ``predict_attention`` (``hasattr(est, "predict_attention")`` is False;
    the attribute raises an ``AttributeError`` saying so).

    Parameters
    ----------
    module : torch module class, default=RecurrentNet
        Built with ``token_dim`` and the parameters below.
    token_dim : int or None, default=None
        Token dimension d; None: learned from ``X`` at a fresh ``fit``.
    cell : {"gru", "lstm", "rnn"}, default="gru"
        torch's ``nn.GRU``, ``nn.LSTM`` or ``nn.RNN`` (tanh).
    hidden_size : int, default=32
        Width of the hidden state.
    n_layers : int, default=1
        Stacked recurrent layers.
    {layout}
        In the query layout it reads the token rows, then the query rows, in order.
    {n_selected}
    random_state : int, RandomState or None, default=None
        Seeds the initial weights and the shuffling.
    optimizer, lr, max_epochs, batch_size, train_split, verbose, **kwargs
        As in :class:`skorch.NeuralNetRegressor`; defaults Adam, lr=0.003,
        batch_size=256, 30 epochs.
    {device}
    {lr_schedule}

    Attributes
    ----------
    module_ : RecurrentNet
        The fitted module.
    n_features_in_ : int
        token_dim + 1, the last axis of ``X``.
    token_dim_ : int
        Token dimension d the module was built with.
    seq_len_ : int or None
        Sequence length T of the data first trained on; None after
        ``initialize()``.
    history_ : skorch.History
        Per-epoch training record.

    Notes
    -----
    A changed ``cell``, ``hidden_size``, ``n_layers``, ``token_dim``,
    ``module`` or ``module__*`` makes a fitted estimator read as unfitted
    until it is refit or the value is set back. Saved weights load into
    ``SparseTokenRNN(..., token_dim=d).initialize()``.

    Examples
    --------
    >>> from sparse_token_estimators import make_sparse_selection, SparseTokenRNN
    >>> X, y = make_sparse_selection(1000, seq_len=10, token_dim=4, random_state=0)
    >>> est = SparseTokenRNN(cell="lstm", hidden_size=16, max_epochs=3,
    ...                      random_state=0).fit(X, y)
    >>> est.predict(X[:3]).shape
    (3, 4)
    """

    _parameter_rules = {
        **_SparseTokenRegressor._parameter_rules,
        "cell": [_rules.OneOf(*CELLS)],
        "hidden_size": _rules.POSITIVE,
        "n_layers": _rules.POSITIVE,
    }
    _module_params = ("cell", "hidden_size", "n_layers")
    _predict_block = 64

    def __init__(self, module=RecurrentNet, *, token_dim=None, cell="gru", hidden_size=32,
                 n_layers=1, layout="indicator", n_selected=None,
                 random_state=None, optimizer=torch.optim.Adam, lr=0.003,
                 max_epochs=30, batch_size=256, train_split=None, verbose=0, device="auto",
                 lr_schedule="constant", **kwargs):
        super().__init__(
            module, token_dim=token_dim, layout=layout, n_selected=n_selected,
            random_state=random_state, optimizer=optimizer,
            lr=lr, max_epochs=max_epochs, batch_size=batch_size, train_split=train_split,
            verbose=verbose, device=device, lr_schedule=lr_schedule, **kwargs,
        )
        self.cell = cell
        self.hidden_size = hidden_size
        self.n_layers = n_layers

    def _module_kwargs(self):
        return {**super()._module_kwargs(), "token_dim": self.token_dim_}

    @property
    def predict_attention(self):
        # absent (hasattr is False), with the reason, rather than a generic AttributeError
        raise AttributeError(
            "SparseTokenRNN has no predict_attention: a recurrent net has no attention "
            "weights over the positions (it reads the sequence into one hidden state). "
            "SparseTokenTransformer and SparseTokenEncoder offer predict_attention."
        )
