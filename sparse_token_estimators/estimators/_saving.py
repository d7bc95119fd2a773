"""How an estimator saves, loads and pickles itself (the work is ``_persistence``'s).

``PersistenceMixin`` is the part of ``_base._SparseTokenRegressor`` that
writes and reads files: ``save_params`` and ``state_files`` (as readers of the
estimator's lock: the weights of one step), ``load_params`` (as a writer), and
pickling.
"""

from . import _persistence
from ._lock import training_lock


class PersistenceMixin:
    """Saving, loading and pickling (a mixin of skorch's ``NeuralNet``)."""

    def state_files(self, files, use_safetensors=False):
        """``{f_key: bytes}``: what ``save_params(**files)`` writes, serialised in memory.

        Parameters
        ----------
        files : iterable of str
            The ``f_`` keys to serialise (``f_params``, ``f_optimizer``, ...).
        use_safetensors : bool, default=False

        Returns
        -------
        data : dict
        """
        return _persistence.state_files(self, files, use_safetensors)

    def save_params(self, f_params=None, f_optimizer=None, f_criterion=None, f_history=None,
                    use_safetensors=False, **kwargs):
        """Save the weights, optimizer, criterion and history, each file atomically.

        As skorch's ``save_params``, and: the weights file records what made
        it (the estimator class, its structural parameters and sizes, a
        format version), so that ``load_params`` can refuse weights of
        another model; each file is written to a temporary file beside it,
        fsynced and moved over the target only once every file of the call
        is written, so a crash or a full disk leaves the old files; a failed
        write raises an ``OSError`` naming the path and the cause.

        Parameters
        ----------
        f_params : str, path or file-like, default=None
            Where the module's weights go (torch's format, or safetensors with
            ``use_safetensors=True``); None saves none.
        f_optimizer, f_criterion : str, path or file-like, default=None
            Where the optimizer's or the criterion's state goes (torch's
            format only); None saves none.
        f_history : str, path or file-like, default=None
            Where the training history goes, as JSON; None saves none.
        use_safetensors : bool, default=False
            Write the weights as safetensors (tensors only, loading runs no
            code); needs the ``safetensors`` extra.
        **kwargs
            ``f_<name>`` for any other module, criterion or optimizer of the
            net, as skorch's ``save_params`` takes them.

        Returns
        -------
        None
        """
        # metadata with the weights, atomic writes
        with training_lock(self).reading():  # the weights of one step, never half-updated
            _persistence.save(self, dict(f_params=f_params, f_optimizer=f_optimizer,
                                         f_criterion=f_criterion, f_history=f_history,
                                         **kwargs), use_safetensors)

    def load_params(self, f_params=None, f_optimizer=None, f_criterion=None, f_history=None,
                    checkpoint=None, use_safetensors=False, **kwargs):
        """Load weights, optimizer, criterion and history: all of them, or nothing.

        As skorch's ``load_params``, and: every file is read and checked
        before anything changes, weights whose recorded parameters differ
        from this estimator's are refused with each difference and the fix
        named (weights saved without a record, by skorch or an earlier
        release, are checked by their keys and shapes), and if applying fails
        the estimator is put back as it was. ``checkpoint`` may be a
        :class:`~sparse_token_estimators.checkpoints.Checkpoint` or
        ``TrainEndCheckpoint`` (its manifest names the files of one epoch, in
        the format they were saved in) or skorch's own ``Checkpoint``. If a
        structural parameter changed since the module was built, the module
        is rebuilt from the current parameters first.

        Parameters
        ----------
        f_params : str, path or file-like, default=None
            The weights to load (as saved by ``save_params``); None loads none.
        f_optimizer, f_criterion : str, path or file-like, default=None
            The optimizer's or the criterion's state to load; None loads none.
        f_history : str, path or file-like, default=None
            The training history (JSON) to load; None loads none.
        checkpoint : Checkpoint, TrainEndCheckpoint or None, default=None
            Load the files a checkpoint callback saved instead of naming them.
        use_safetensors : bool, default=False
            Read the weights as safetensors.
        **kwargs
            ``f_<name>`` for any other module, criterion or optimizer of the
            net, as skorch's ``load_params`` takes them.

        Returns
        -------
        self : estimator
            This estimator, so that ``Est(...).initialize().load_params(...)``
            chains (skorch's ``load_params`` returns None).
        """
        # all files checked before anything changes; metadata checked against parameters
        with training_lock(self):
            return _persistence.load(
                self, dict(f_params=f_params, f_optimizer=f_optimizer, f_criterion=f_criterion,
                           f_history=f_history, **kwargs), checkpoint, use_safetensors)

    def __getstate__(self):
        # the training generator is not picklable as such; under the lock, as predict
        with training_lock(self).reading():
            return _persistence.pickled(super().__getstate__())

    def __setstate__(self, state):
        # "auto" device and older pickles
        _persistence.unpickle(self, state, super().__setstate__)
