"""Fit a group of estimators side by side: each exactly as its own ``fit`` would.

A critical-width search fits one small model at every rate of a grid for
every seed. :func:`fit_group` trains the fits of such a group in lock step:
one backward pass per round for all the models' losses ("exact"), or, for the
paper's model, one batched forward, backward and Adam step (``mode="fused"``,
``_fused``), which pays a small model's per-operation costs once per group
(what a GPU's kernel launches need; on the CPU the exact mode is about as
fast as lone fits, the fused one up to 3.5x faster on small models:
``benchmarks/bench_group.py``).

Each estimator runs its own ``fit`` (its checks, its transaction, its seeded
weights, data, shuffling and positional draws, its callbacks and ``history_``,
its optimizer); only the loop over the batches is shared. The fits are
nested: member k's ``fit`` reaches its loop, which starts member k + 1's
``fit``, and the last one trains them all, one batch of each per round, each
model's steps in the order of its lone fit. A model whose fit raises
(``TrainingDivergedError``, a callback's stop) leaves the round alone, and its
own ``fit`` raises or returns as a lone fit does; the others go on unchanged.
Separate graphs share no gradient, so every model's weights, history and
predictions are bit for bit those of its lone fit (tested). A
``KeyboardInterrupt`` ends the fits it reaches as it ends lone fits, unless
``stop_all`` says it stops them all (``critical_width``: a Ctrl-C, not a
callback's planned stop): then every fit is undone and it propagates.

What this module calls on each estimator (the entry points to re-point if
the estimator layer changes): ``fit``, and skorch's ``fit_loop`` (replaced for
the call, on the instance), ``check_data``, ``check_training_readiness``,
``get_split_datasets``, ``get_iterator``, ``notify``, ``history``,
``_zero_grad_optimizer``, ``_set_training``, ``infer``, ``get_loss``,
``get_all_learnable_params``, ``_step_optimizer``, ``run_single_epoch`` and
``validation_step``: the steps of skorch's ``fit_loop`` / ``train_step``, with
``loss.backward()`` taken out and made once for the group.
"""

import inspect
import threading
import time

import torch
from sklearn.utils.metadata_routing import _routing_enabled, process_routing
from skorch.callbacks import Callback
from skorch.dataset import get_len, unpack_data
from skorch.utils import TeeGenerator

from ._fused import FusedStep, fusable

__all__ = ["fit_group", "group_cpu_seconds"]

#: the members of one chain of nested fits (deeper nesting would near Python's stack limit)
_CHAIN = 32
#: id(estimator) -> CPU seconds attributed to it, while its group trains (this thread)
_CLOCKS = threading.local()


def _groupable(net):
    """Whether ``net`` can join a group: one of the package's four estimators, as they are,
    with their own module and an optimizer that takes no closure."""
    from .estimators import (
        SparseTokenEncoder,
        SparseTokenFCN,
        SparseTokenRNN,
        SparseTokenTransformer,
    )

    kinds = (SparseTokenTransformer, SparseTokenFCN, SparseTokenEncoder, SparseTokenRNN)
    if type(net) not in kinds:  # a subclass may override a step of the loop
        return False
    default_module = inspect.signature(type(net)).parameters["module"].default
    return net.module is default_module and net.optimizer is not torch.optim.LBFGS


def fit_group(estimators, data, *, mode="exact", stop_all=None):
    """Fit every estimator on its data, side by side; each ends as its lone ``fit``.

    Parameters
    ----------
    estimators : list of estimators
        The fits of a group, e.g. one model and width at several rates and
        seeds. The transformer, the FCN, the encoder and the RNN train
        together; any other (``SparseTokenSSM``, a subclass, a user's module,
        LBFGS) is fitted alone, with the same result.
    data : list of (X, y)
        Each estimator's training data (``y`` None for a ``SparseSelectionStream``).
    mode : {"exact", "fused"}, default="exact"
        "exact": every model bit for bit its lone fit. "fused": a group of the
        paper's model (``_fused.fusable``) trains as one stacked model, equal to
        its lone fits to float rounding; any other group trains exactly.
    stop_all : callable or None, default=None
        What a ``KeyboardInterrupt`` raised in a fit of the group (a Ctrl-C,
        a callback's ``raise KeyboardInterrupt``) does. None, or
        ``stop_all(exc)`` False: it ends the fits it reaches as it ends a lone
        fit (skorch ends a training on it as if it were complete; a callback's
        planned stop, e.g. ``EarlyStopping``, ends its own model only).
        ``stop_all(exc)`` True: every fit stops at once and ``fit_group``
        raises ``exc``; the fits it cut short are undone (their estimators
        as before the call), none is scored.

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
    if mode not in ("exact", "fused"):
        raise ValueError(f"mode must be 'exact' or 'fused'; got {mode!r}.")
    if stop_all is not None and not callable(stop_all):
        raise ValueError(f"stop_all must be None or a callable (KeyboardInterrupt -> bool); "
                         f"got {stop_all!r}.")
    if len(estimators) != len(data):
        raise ValueError(f"fit_group needs one (X, y) per estimator; got {len(estimators)} "
                         f"estimators and {len(data)} data sets.")
    errors = [None] * len(estimators)
    members = []
    try:
        for i, net in enumerate(estimators):
            if _groupable(net):
                members.append(i)
            else:
                errors[i] = _guarded_lone_fit(net, *data[i], stop_all)
        for start in range(0, len(members), _CHAIN):
            chain = members[start:start + _CHAIN]
            group = _Group([estimators[i] for i in chain], [data[i] for i in chain], mode,
                           stop_all)
            for i, error in zip(chain, group.run()):
                errors[i] = error
    except _Abort as abort:
        raise abort.interrupt from None
    return errors


def group_cpu_seconds(net, default):
    """CPU seconds of ``net``'s training in its group (its own steps, an even share of the
    shared backward passes); ``default`` when it is not training in a group."""
    return getattr(_CLOCKS, "seconds", {}).get(id(net), default)


def _lone_fit(net, X, y):
    try:
        net.fit(X) if y is None else net.fit(X, y)
    except Exception as exc:  # noqa: BLE001 -- reported per estimator, as a lone fit raises
        return exc
    return None


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


def _guarded_lone_fit(net, X, y, stop_all):
    """``_lone_fit``, its training loop's interrupts checked against ``stop_all``."""
    loop = getattr(net, "fit_loop", None)
    if stop_all is None or not callable(loop):
        return _lone_fit(net, X, y)

    def guarded(*args, **kwargs):
        try:
            return loop(*args, **kwargs)
        except KeyboardInterrupt as exc:
            _check_abort(stop_all, exc)
            raise

    net.fit_loop = guarded  # this instance, this call
    try:
        return _lone_fit(net, X, y)
    except KeyboardInterrupt as exc:
        _check_abort(stop_all, exc)
        raise
    finally:
        net.__dict__.pop("fit_loop", None)


class _Stop(Exception):
    """A model left the group: ``outcome`` is what its loop raises at its own level."""

    def __init__(self, outcome):
        super().__init__()
        self.outcome = outcome


class _Group:
    """One chain of nested fits and the lock-step loop the last one runs."""

    def __init__(self, nets, data, mode, stop_all=None):
        self.nets, self.data, self.mode, self.fused = nets, data, mode, None
        self.stop_all, self.aborted = stop_all, False
        n = len(nets)
        self.errors, self.loops, self.outcomes = [None] * n, [None] * n, [None] * n

    def run(self):
        seconds = getattr(_CLOCKS, "seconds", None)
        if seconds is None:
            seconds = _CLOCKS.seconds = {}
        for net in self.nets:
            seconds[id(net)] = 0.0
        try:
            self._enter(0)
        finally:
            for net in self.nets:
                seconds.pop(id(net), None)
        return self.errors

    def _enter(self, k):
        """Fit member k; its loop enters member k + 1 (the last trains the group)."""
        if k == len(self.nets):
            self._train()
            return
        net, reached = self.nets[k], []

        def joined_loop(X, y=None, epochs=None, *, _routing_method="fit", **fit_params):
            reached.append(True)
            try:
                self.loops[k] = _loop(self, net, X, y, epochs, _routing_method, fit_params)
            except KeyboardInterrupt as exc:
                self.check_abort(exc)
                raise
            finally:  # its set-up may fail: the others are fitted all the same
                if not self.aborted:
                    self._enter(k + 1)
            if self.outcomes[k] is not None:
                raise self.outcomes[k]
            return net

        net.fit_loop = joined_loop  # this instance, this call (skorch's fit_loop otherwise)
        try:
            self.errors[k] = _lone_fit(net, *self.data[k])
        except KeyboardInterrupt as exc:  # out of its fit, before or after its loop
            self.check_abort(exc)
            raise
        finally:
            net.__dict__.pop("fit_loop", None)
        if not reached:  # its fit failed before its loop: the others go on without it
            self._enter(k + 1)

    def check_abort(self, exc):
        """Raise ``_Abort`` (and stop every fit) if ``stop_all`` says so of ``exc``."""
        try:
            _check_abort(self.stop_all, exc)
        except _Abort:
            self.aborted = True
            raise

    def _train(self):
        """Every model's steps, one batch of each per round: exact, one backward pass per
        round for the models' own forward passes; fused, one ``FusedStep``."""
        seconds = _CLOCKS.seconds
        pending = {k: None for k, loop in enumerate(self.loops) if loop is not None}
        if self.mode == "fused" and pending and fusable([self.nets[k] for k in pending]):
            self.fused = FusedStep({k: self.nets[k] for k in pending})
        try:
            while pending:
                items = {}
                for k, value in pending.items():
                    start = time.process_time()
                    try:
                        items[k] = self.loops[k].send(value)
                    except StopIteration:
                        pass
                    except _Stop as stop:
                        self.outcomes[k] = stop.outcome
                    except Exception as exc:  # noqa: BLE001 -- this model's fit raises it
                        self.outcomes[k] = exc
                    finally:
                        seconds[id(self.nets[k])] += time.process_time() - start
                if not items:
                    break
                start = time.process_time()
                if self.fused is not None:
                    pending = self.fused(items)
                else:
                    torch.autograd.backward(list(items.values()))
                    pending = dict.fromkeys(items)
                share = (time.process_time() - start) / len(items)
                for k in items:
                    seconds[id(self.nets[k])] += share
        except KeyboardInterrupt as exc:  # Ctrl-C: every model stops, as a lone fit does
            self.check_abort(exc)
            for k in pending:
                self.outcomes[k] = exc
        finally:
            if self.fused is not None:
                self.fused.finish()


def _notify(group, net, name, **kwargs):
    """``net.notify``, skipping the callbacks whose method is skorch's empty one (a cost
    counted on every batch of a small model); an error of a callback (its stop,
    ``TrainingDivergedError``) ends this model's loop only (an interrupt ``stop_all``
    takes, every model's)."""
    empty = getattr(Callback, name)
    try:
        getattr(net, name)(net, **kwargs)
        for _, callback in net.callbacks_:
            if getattr(type(callback), name, None) is not empty:
                getattr(callback, name)(net, **kwargs)
    except (Exception, KeyboardInterrupt) as exc:
        group.check_abort(exc)
        raise _Stop(exc) from exc


def _loop(group, net, X, y, epochs, routing_method, fit_params):
    """skorch's ``fit_loop`` for ``net`` as a generator: it yields each training batch's
    loss for the group's backward pass. Its set-up runs now, in ``net``'s own ``fit``."""
    net.check_data(X, y)
    net.check_training_readiness()
    epochs = net.max_epochs if epochs is None else epochs
    split_params = fit_params
    if _routing_enabled():
        split_params = process_routing(net, routing_method, **fit_params).get(
            "splitter", {"split": {}})["split"]
    dataset_train, dataset_valid = net.get_split_datasets(X, y, **split_params)
    iterator_train = net.get_iterator(dataset_train, training=True)
    iterator_valid = None if dataset_valid is None else net.get_iterator(dataset_valid)
    return _epochs(group, net, epochs, iterator_train, iterator_valid, fit_params,
                   {"dataset_train": dataset_train, "dataset_valid": dataset_valid})


def _epochs(group, net, epochs, iterator_train, iterator_valid, fit_params, datasets):
    """The epochs of skorch's ``fit_loop``, ``run_single_epoch`` and ``train_step``: exact,
    it yields the batch's loss for the group's backward pass; fused, the batch, and
    receives its loss after the group's step."""
    for _ in range(epochs):
        _notify(group, net, "on_epoch_begin", **datasets)
        batch_count = 0
        for batch in iterator_train:
            _notify(group, net, "on_batch_begin", batch=batch, training=True)
            net._set_training(True)
            if group.fused is not None:  # no callback reads the gradients (fusable)
                y_pred = None
                loss = yield unpack_data(batch)  # the group's forward, backward and step
            else:
                net._zero_grad_optimizer()
                Xi, yi = unpack_data(batch)
                y_pred = net.infer(Xi, **fit_params)
                loss = net.get_loss(y_pred, yi, X=Xi, training=True)
                yield loss  # the group's backward pass
                _notify(group, net, "on_grad_computed",
                        named_parameters=TeeGenerator(net.get_all_learnable_params()),
                        batch=batch, training=True)
                net._step_optimizer(None)
            net.history.record_batch("train_loss", loss.item())
            net.history.record_batch("train_batch_size", get_len(batch[0]) if isinstance(
                batch, (tuple, list)) else get_len(batch))
            _notify(group, net, "on_batch_end", batch=batch, training=True, loss=loss,
                    y_pred=y_pred)
            batch_count += 1
        net.history.record("train_batch_count", batch_count)
        try:
            net.run_single_epoch(iterator_valid, training=False, prefix="valid",
                                 step_fn=net.validation_step, **fit_params)
        except (Exception, KeyboardInterrupt) as exc:
            group.check_abort(exc)
            raise _Stop(exc) from exc
        _notify(group, net, "on_epoch_end", **datasets)
