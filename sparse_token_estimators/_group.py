"""Fit a group of estimators, each exactly as its own ``fit`` would: :func:`fit_group`.

A critical-width search fits one small model at every rate of a grid for
every seed. ``trainer="exact"`` makes those fits one after another, each its
own plain ``fit``: every record is its lone fit's, by construction.
``trainer="fused"`` trains the fits whose estimator class declares a
``fused_trainer`` (``_fused``: the paper's model) side by side, one stacked
forward and backward pass per round for all of them, each fit still its own
``fit`` in its own thread; they equal their lone fits to float rounding. The
others train exactly. ``_trainers.check_trainer`` is the one check of the
name, for ``fit_group``, ``critical_width``, the reproduction's configuration
and its command line.

A ``KeyboardInterrupt`` (a Ctrl-C, a callback's ``raise KeyboardInterrupt``)
ends the fit it reaches as it ends a lone fit, unless ``stop_all`` says it
stops them all: then every fit is undone and it propagates.
"""

import threading
from collections.abc import Sequence

from ._fused import StackedRound, trainer_of
from ._trainers import TRAINERS, check_trainer
from .estimators._state import Transaction

__all__ = ["TRAINERS", "check_trainer", "fit_group", "group_cpu_seconds", "trainer_of"]

#: id(estimator) -> (its fused group, its place there), while the group trains
_MEMBERS = {}
_MEMBERS_LOCK = threading.Lock()


def _check_group(estimators, data):
    """Refuse, before any fit, what ``fit_group`` cannot train (naming the fix)."""
    if not isinstance(estimators, Sequence) or isinstance(estimators, str):
        raise ValueError(f"estimators must be a list of estimators; got "
                         f"{type(estimators).__name__}.")
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise ValueError(f"data must be a list of (X, y) pairs, one per estimator; got "
                         f"{type(data).__name__}.")
    seen = {}
    for i, net in enumerate(estimators):
        if isinstance(net, type):
            raise ValueError(
                f"estimators[{i}] is the class {net.__name__}, not an estimator: pass an "
                f"instance, e.g. {net.__name__}(...).")
        if not callable(getattr(net, "fit", None)):
            raise ValueError(f"estimators[{i}] has no fit method; got {type(net).__name__}.")
        if id(net) in seen:
            raise ValueError(
                f"estimators[{seen[id(net)]}] and estimators[{i}] are the same estimator: "
                "each fit of a group needs its own (one estimator fitted twice would end as "
                "its second fit only); pass sklearn.base.clone(estimator) for each.")
        seen[id(net)] = i
    if len(estimators) != len(data):
        raise ValueError(f"fit_group needs one (X, y) per estimator; got {len(estimators)} "
                         f"estimators and {len(data)} data sets.")
    for i, pair in enumerate(data):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            got = (f"a {type(pair).__name__} of {len(pair)}" if isinstance(pair, (tuple, list))
                   else f"a {type(pair).__name__}")
            raise ValueError(
                f"data[{i}] must be a pair (X, y) (y None for a SparseSelectionStream); got "
                f"{got}. Pass [(X, y), ...]; sample weights are not supported.")


def fit_group(estimators, data, *, trainer="exact", stop_all=None):
    """Fit every estimator on its data; each ends as its lone ``fit``.

    Parameters
    ----------
    estimators : list of estimators
        The fits of a group, e.g. one model and width at several rates and
        seeds; each a distinct estimator (``sklearn.base.clone`` one for each).
    data : list of (X, y)
        Each estimator's training data (``y`` None for a ``SparseSelectionStream``).
    trainer : {"exact", "fused"}, default="exact"
        "exact": the fits one after another, each its own plain ``fit``.
        "fused": the estimators whose class declares a ``fused_trainer``
        (``SparseTokenTransformer``, with its own module) train side by side
        as one stacked model, equal to their lone fits to float rounding
        (:func:`trainer_of` says which); the others as with "exact".
    stop_all : callable or None, default=None
        What a ``KeyboardInterrupt`` raised in a fit of the group (a Ctrl-C,
        a callback's ``raise KeyboardInterrupt``) does. None, or
        ``stop_all(exc)`` False: it ends the fit it reaches as it ends a lone
        fit (skorch ends a training on it as if it were complete).
        ``stop_all(exc)`` True: every fit stops and ``fit_group`` raises
        ``exc``; every estimator is then as before the call.

    Returns
    -------
    errors : list of (Exception or None)
        For each estimator, what its lone ``fit`` would have raised (e.g.
        ``TrainingDivergedError``; the estimator is then as it was before the
        call), or None: it is fitted, as its lone fit.

    Examples
    --------
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(256, seq_len=6, token_dim=2, random_state=0)
    >>> nets = [SparseTokenFCN(hidden_width=8, lr=lr, max_epochs=2, random_state=seed)
    ...         for lr in (0.003, 0.01) for seed in (0, 1)]
    >>> fit_group(nets, [(X, y)] * 4)
    [None, None, None, None]
    >>> lone = SparseTokenFCN(hidden_width=8, lr=0.01, max_epochs=2, random_state=1).fit(X, y)
    >>> bool((lone.predict(X) == nets[3].predict(X)).all())
    True
    """
    check_trainer(trainer)
    if stop_all is not None and not callable(stop_all):
        raise ValueError(f"stop_all must be None or a callable (KeyboardInterrupt -> bool); "
                         f"got {stop_all!r}.")
    _check_group(estimators, data)
    undo = [Transaction(net) for net in estimators]
    errors = [None] * len(estimators)
    fused = [i for i, net in enumerate(estimators) if trainer_of(net, trainer) == "fused"]
    try:
        for i, net in enumerate(estimators):
            if i not in fused:
                errors[i] = _fit(net, *data[i], stop_all)
        if fused:
            for i, error in zip(fused, _fit_fused([estimators[i] for i in fused],
                                                  [data[i] for i in fused], stop_all)):
                errors[i] = error
    except _Abort as abort:
        for transaction in undo:
            transaction.rollback()
        raise abort.interrupt from None
    return errors


def group_cpu_seconds(net, default):
    """CPU seconds of ``net``'s training in its fused group (an even share of the group's
    while it trains); ``default`` when it is not training in one (a lone fit: its own)."""
    with _MEMBERS_LOCK:
        member = _MEMBERS.get(id(net))
    return default if member is None else member[0].cpu_seconds(member[1])


class _Abort(BaseException):
    """A ``KeyboardInterrupt`` that stops every fit (``stop_all``): no ``Exception`` and no
    ``KeyboardInterrupt``, so that no fit's loop (skorch's) takes it for its own end."""

    def __init__(self, interrupt):
        super().__init__(str(interrupt))
        self.interrupt = interrupt


def _check_abort(stop_all, exc):
    """Raise ``_Abort`` if the ``KeyboardInterrupt`` ``exc`` stops every fit."""
    if stop_all is not None and isinstance(exc, KeyboardInterrupt) and stop_all(exc):
        raise _Abort(exc) from exc


def _fit(net, X, y, stop_all):
    """``net``'s own ``fit``: the error it raises, or None; an interrupt of its training
    loop is checked against ``stop_all`` (skorch's ``fit_loop``, wrapped for the call)."""
    loop = getattr(net, "fit_loop", None)
    if stop_all is not None and callable(loop):
        def guarded(*args, **kwargs):
            try:
                return loop(*args, **kwargs)
            except KeyboardInterrupt as exc:
                _check_abort(stop_all, exc)
                raise

        net.fit_loop = guarded  # this instance, this call
    try:
        net.fit(X) if y is None else net.fit(X, y)
    except KeyboardInterrupt as exc:
        _check_abort(stop_all, exc)
        raise
    except Exception as exc:  # noqa: BLE001 -- reported per estimator, as a lone fit raises
        return exc
    finally:
        net.__dict__.pop("fit_loop", None)
    return None


def _fit_fused(nets, data, stop_all):
    """Each net's own ``fit`` in its own thread, their steps made by one ``StackedRound``
    in this thread; returns their errors."""
    group = StackedRound(len(nets))
    outcomes = [None] * len(nets)

    def member(k):
        net = nets[k]
        net.train_step = type(net).fused_trainer.train_step(group, k, net)
        try:
            group.begin(k)
            outcomes[k] = _fit(net, *data[k], stop_all)
        except BaseException as exc:  # noqa: BLE001 -- an interrupt: raised in the caller
            outcomes[k] = exc
            if isinstance(exc, _Abort):
                group.halt(exc)
        finally:
            net.__dict__.pop("train_step", None)
            with _MEMBERS_LOCK:
                _MEMBERS.pop(id(net), None)
            group.leave(k)

    with _MEMBERS_LOCK:
        _MEMBERS.update({id(net): (group, k) for k, net in enumerate(nets)})
    threads = [threading.Thread(target=member, args=(k,), daemon=True,
                                name=f"fit_group-{k}") for k in range(len(nets))]
    for thread in threads:
        thread.start()
    try:
        group.run()
    except KeyboardInterrupt as exc:  # a Ctrl-C here: every fit ends as its lone fit would
        try:
            _check_abort(stop_all, exc)
            group.halt(exc)
        except _Abort as abort:
            group.halt(abort)
        group.run()
    finally:
        for thread in threads:
            thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
    return outcomes
