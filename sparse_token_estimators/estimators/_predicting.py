"""How an estimator predicts and scores: checked input, fixed-size blocks, no writes.

``PredictionMixin`` is the part of ``_base._SparseTokenRegressor`` that reads a
fitted estimator: ``predict`` and ``score`` (under the estimator's lock, as
readers), and ``infer``, the module's forward in blocks of a fixed size at
prediction so that a sequence's prediction does not depend on its batch.
"""

import warnings

import numpy as np
import torch
from sklearn.metrics import r2_score
from skorch.utils import to_tensor

from .. import _layout
from ..exceptions import NonFinitePredictionWarning
from . import _checks, _docs
from ._lock import training_lock

#: positions per prediction block (``infer``) at the longest lengths
_BLOCK_POSITIONS = 1 << 14


def pad_to_block(x, block):
    """``x`` (n, rows, channels) padded to a multiple of ``block`` sequences.

    The padding repeats the first sequence, valid data in either layout (an
    empty query-layout sequence would name position 0); callers drop the
    outputs of the padding.
    """
    return torch.cat([x, x[:1].expand(-len(x) % block, *x.shape[1:])])


class PredictionMixin:
    """Prediction (a mixin of skorch's ``NeuralNet``; the class declares
    ``_predict_block``)."""

    def predict(self, X):
        """Predict the average of the selected tokens.

        Safe to call from several threads on one fitted estimator, also while
        another thread trains it (``partial_fit``): training and prediction hold
        the estimator's lock, so a prediction sees the weights between two
        training calls, or at the end of an epoch (while the fit runs its
        ``on_epoch_end`` callbacks: a thread such a callback starts and joins
        is served, not blocked), never half-updated ones. A sequence's prediction depends
        on that sequence and the weights only, not on the batch it is in: on the
        CPU bit for bit whatever ``batch_size`` (the paper's model runs its
        products in blocks of a fixed size; the encoder, the RNN and the FCN
        run their forward in blocks of a fixed size, ``infer``); on a GPU,
        where kernels may be chosen by the batch, up to float32 rounding.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator. (A torch Dataset of such
            sequences is accepted too: skorch's scoring callbacks pass one.)

        Returns
        -------
        y_pred : ndarray of shape (n_samples, token_dim), float64
            As scikit-learn regressors return; the module computes in float32.

        Warns
        -----
        NonFinitePredictionWarning
            When some predictions are inf or NaN (the outputs overflow float32,
            e.g. on X far beyond the range trained on); ``score`` raises instead.
        """
        # checked input, float64 output, a warning on non-finite values
        with training_lock(self).reading():
            X = _checks.check_X(self, X)
            y_pred = self._predict_checked(X)
        problem = non_finite(self, y_pred, X)
        if problem:
            warnings.warn(f"{problem} The predictions are returned as they are.",
                          NonFinitePredictionWarning, stacklevel=2)
        return y_pred

    def _predict_checked(self, X):
        with self.device_scope():
            # skorch's prediction loop, cast to the float64 regressors return
            return self.predict_proba(X).astype(np.float64)

    @_docs.compose
    def infer(self, x, **fit_params):
        """The module's forward on a batch; at prediction, in blocks of a fixed size.

        With ``_predict_block`` set (the encoder, the RNN and the FCN), an
        eval-mode batch is padded with copies of its first sequence to a
        multiple of that many (fewer for sequences longer than 256 positions: as
        many as make 16384 positions) and run block by block. Every forward call
        at one length then has the same shape whatever ``batch_size``: matrix
        kernels round differently at different shapes, and a prediction must
        depend on its own sequence only. Training batches run as they come.

        {infer}
        """
        # a prediction must not depend on the batch it is in
        with self.device_scope():  # also when skorch's forward calls it, outside ours
            x = to_tensor(x, device=self.device)
            if (self._predict_block is None or self.module_.training
                    or not isinstance(x, torch.Tensor)):
                return super().infer(x, **fit_params)
            return self._in_blocks(x, lambda chunk: super(PredictionMixin, self).infer(
                chunk, **fit_params))

    def _in_blocks(self, x, forward):
        """``forward`` over ``x`` in eval mode, in padded blocks of ``_block_for`` sequences."""
        block = self._block_for(x.shape[1])
        outputs = [forward(chunk) for chunk in pad_to_block(x, block).split(block)]
        return torch.cat(outputs)[:len(x)]

    def _block_for(self, seq_len):
        # fewer sequences per block when they are long, so that a block costs
        # about what a batch of 64 short ones does; it depends on the length only
        return max(1, min(self._predict_block, _BLOCK_POSITIONS // seq_len))

    def score(self, X, y, sample_weight=None):
        """R^2 of ``predict(X)`` against ``y``, averaged over the token_dim outputs.

        Parameters
        ----------
        X : array-like of shape (n_samples, seq_len, token_dim + 1)
            Tokens and the selection indicator.
        y : array-like of shape (n_samples, token_dim)
            The true averages of the selected tokens.
        sample_weight : array-like of shape (n_samples,) or None, default=None
            Weights of the samples in the R^2.

        Returns
        -------
        score : float
            1 is a perfect prediction, 0 that of the mean of ``y``.
        """
        # y checked against X, and no R^2 of non-finite predictions
        with training_lock(self).reading():
            X = _checks.check_X(self, X)
            y = _layout.check_target(y, X)
            y_pred = self._predict_checked(X)
        problem = non_finite(self, y_pred, X)
        if problem:
            raise ValueError(f"{problem} No R^2 can be computed.")
        return r2_score(y, y_pred, sample_weight=sample_weight)


def non_finite(net, y_pred, X):
    """What is wrong with predictions that are not all finite, and the fix; "" if none."""
    bad = ~np.isfinite(y_pred)
    if not bad.any():
        return ""
    largest = f" (largest |X| {float(np.abs(X).max()):.3g})" if isinstance(X, np.ndarray) else ""
    return (f"{type(net).__name__}.predict(X) returned {int(bad.sum())} non-finite value(s) "
            f"(inf or NaN) of {y_pred.size}: the model's outputs overflow float32 on this "
            f"X{largest}. Scale X as the training data was scaled, or refit on data of this "
            "range.")
