"""The package's warnings and errors."""


class CheckpointWarning(UserWarning):
    """A checkpoint could not be saved during ``fit``; training went on.

    Issued by :class:`~sparse_token_estimators.checkpoints.Checkpoint` (and
    ``TrainEndCheckpoint``) at every verbosity, with the path and the cause;
    the previous checkpoint is left as it was and still loads. To stop
    training instead, turn it into an error:
    ``warnings.simplefilter("error", CheckpointWarning)``.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", CheckpointWarning)
    ...     try:
    ...         warnings.warn("disk full", CheckpointWarning)
    ...     except CheckpointWarning as exc:
    ...         print("stopped:", exc)
    stopped: disk full
    """


class NonFinitePredictionWarning(RuntimeWarning):
    """``predict`` returned inf or NaN: the model's outputs overflow float32 on this X.

    Issued by the estimators' ``predict`` with how many values are not
    finite and the fix (scale X as the training data was scaled); ``score``
    raises a ``ValueError`` on the same input, since no R^2 can be computed.
    ``warnings.simplefilter("error", NonFinitePredictionWarning)`` makes
    ``predict`` raise too.

    Examples
    --------
    >>> issubclass(NonFinitePredictionWarning, RuntimeWarning)
    True
    """


class InvalidParameterError(ValueError, TypeError):
    """A constructor parameter has a value it does not accept.

    Raised by ``fit``, ``partial_fit`` and ``initialize`` (and ``predict`` for the
    parameters prediction reads) before anything is built, with scikit-learn's
    wording and the fix. Both a ``ValueError`` and a ``TypeError``, as
    scikit-learn's own error of that name.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN
    >>> try:
    ...     SparseTokenFCN(batch_size=0).initialize()
    ... except InvalidParameterError as exc:
    ...     print(str(exc)[:52])
    The 'batch_size' parameter of SparseTokenFCN must be
    """
