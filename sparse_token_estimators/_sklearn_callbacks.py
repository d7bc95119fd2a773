"""scikit-learn's callbacks (``sklearn.callback``, scikit-learn >= 1.9) for the package.

scikit-learn's callback API gives each fit a tree of tasks (a
``CallbackContext`` per task) and calls its callbacks (``ProgressBar``,
``ScoringMonitor``, a user's ``FitCallback``) at the beginning and end of each
task; a meta-estimator (``GridSearchCV``, ``Pipeline``, ``cross_validate``)
hangs its sub-estimators' trees under its own tasks and propagates its
callbacks into them. What it needs from an estimator:

- ``set_callbacks`` (``CallbackSupportMixin``), which ``CallbackMixin`` adds;
- in ``fit``, a root task from ``_init_callback_context`` (the implementer's
  hook scikit-learn documents on that mixin), begun and ended, and the
  teardown of the callbacks afterwards (``with_callbacks``): ``reports_fit``
  wraps the estimators' training method with both;
- a sub-task per iteration: here one per epoch, begun and ended by skorch's
  own ``on_epoch_begin`` / ``on_epoch_end`` hooks of the net (which skorch
  calls before its callbacks, so that skorch's callbacks, the user's or
  none, change nothing of it).

:class:`SearchTask` does the same for :func:`~sparse_token_estimators.critical_width`
(a task per width, a sub-task per fit, whose epochs hang under it).

Without ``sklearn.callback`` (scikit-learn < 1.9) nothing of this exists:
``CallbackMixin`` is an empty class, ``reports_fit`` returns the method
unchanged and ``critical_width(callbacks=...)`` refuses callbacks with a
message naming the version needed.
"""

import functools
import numbers
import weakref

try:
    from sklearn.callback import CallbackSupportMixin, with_callbacks
except ImportError:  # scikit-learn < 1.9
    CallbackSupportMixin = with_callbacks = None

#: whether this scikit-learn has its callback API
HAS_CALLBACKS = CallbackSupportMixin is not None
#: the running fit of a net: its root task, the data, the running epoch's task, the
#: epochs begun
_RUNNING = weakref.WeakKeyDictionary()


class CallbackMixin(CallbackSupportMixin or object):
    """``set_callbacks`` and each epoch reported as a task (scikit-learn >= 1.9).

    Put it before skorch's net in the bases; it adds nothing on an older
    scikit-learn.
    """

    def on_epoch_begin(self, net, dataset_train=None, dataset_valid=None, **kwargs):
        # skorch's hook of the net itself, called before its callbacks
        super().on_epoch_begin(net, dataset_train=dataset_train,
                               dataset_valid=dataset_valid, **kwargs)
        running = _RUNNING.get(self)
        if running is None:
            return
        root = running["root"]
        if root.max_subtasks is not None and running["begun"] >= root.max_subtasks:
            return  # more epochs than announced: not reported (the tree would refuse them)
        running["begun"] += 1
        running["epoch"] = root.subcontext(task_name="epoch")
        running["epoch"].call_on_fit_task_begin(estimator=self, X=running["X"], y=running["y"])

    def on_epoch_end(self, net, dataset_train=None, dataset_valid=None, **kwargs):
        super().on_epoch_end(net, dataset_train=dataset_train,
                             dataset_valid=dataset_valid, **kwargs)
        running = _RUNNING.get(self)
        if running is None or running["epoch"] is None:
            return
        epoch, running["epoch"] = running["epoch"], None
        # the net as it is after this epoch is the "fitted estimator" (ScoringMonitor
        # scores it); a callback's request to stop is not honoured, as in
        # scikit-learn's own LogisticRegression
        epoch.call_on_fit_task_end(estimator=self, X=running["X"], y=running["y"],
                                   reconstruction_attributes={})


def reports_fit(train):
    """Decorate ``train(net, X, y, ...)``: the fit is a task of scikit-learn's callbacks.

    The root task announces ``net.max_epochs`` epochs (its sub-tasks); it
    begins before ``train`` checks anything and ends after it returns. The
    callbacks' teardown runs however ``train`` ends.
    """
    if not HAS_CALLBACKS:
        return train

    @functools.wraps(train)
    @with_callbacks
    def reported(net, X, y=None, *args, **kwargs):
        epochs = int(net.max_epochs) if isinstance(net.max_epochs, numbers.Integral) else None
        root = net._init_callback_context(max_subtasks=epochs)
        root.call_on_fit_task_begin(estimator=net, X=X, y=y)
        _RUNNING[net] = {"root": root, "X": X, "y": y, "epoch": None, "begun": 0}
        try:
            result = train(net, X, y, *args, **kwargs)
        finally:
            _RUNNING.pop(net, None)
        root.call_on_fit_task_end(estimator=net, X=X, y=y, reconstruction_attributes={})
        return result

    return reported


def check_callbacks(callbacks, name):
    """``callbacks`` as a list (None: empty); refused where scikit-learn has none."""
    if callbacks is None:
        return []
    if not HAS_CALLBACKS:
        import sklearn

        raise ValueError(
            f"{name}(callbacks=...) takes scikit-learn's callbacks (sklearn.callback), which "
            f"scikit-learn {sklearn.__version__} does not have: upgrade to scikit-learn >= "
            "1.9, or pass callbacks=None.")
    if not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    _owner("check").set_callbacks(*callbacks)  # scikit-learn's own check of each callback
    return list(callbacks)


def _owner(name):
    """What holds a search's callbacks and its task tree (not an estimator); the tree
    names it by its class name, ``name``."""
    return type(name, (CallbackSupportMixin,), {})()


class SearchTask:
    """The task tree of a search: the search, a task per evaluation, a leaf per fit.

    With no callbacks every method does nothing (no task is made), so a
    search without callbacks runs as before.

    Parameters
    ----------
    callbacks : list
        scikit-learn callbacks (``check_callbacks``).
    X, y
        The search's training data (passed to the callbacks' hooks).
    name : str, default="critical_width"
        The search's name in the task tree.
    """

    def __init__(self, callbacks, X=None, y=None, *, name="critical_width"):
        self._X, self._y = X, y
        self._root = None
        if callbacks:
            self._owner = _owner(name).set_callbacks(*callbacks)
            self._root = self._owner._init_callback_context(max_subtasks=None)
            self._root.call_on_fit_task_begin(estimator=self._owner, X=X, y=y)

    def fits(self, name, n_fits):
        """A task ``name`` with ``n_fits`` leaves; the leaves (None each without callbacks)."""
        if self._root is None:
            return [None] * n_fits
        task = self._root.subcontext(task_name=name, max_subtasks=n_fits)
        task.call_on_fit_task_begin(estimator=self._owner, X=self._X, y=self._y)
        self._open = task
        return [task.subcontext(task_name="fit") for _ in range(n_fits)]

    def end_fits(self):
        """End the task of the last ``fits``."""
        if self._root is not None:
            self._open.call_on_fit_task_end(estimator=self._owner, X=self._X, y=self._y)

    def close(self):
        """End the search's task and tear its callbacks down (once, however it ended)."""
        if self._root is None:
            return
        root, self._root = self._root, None

        @with_callbacks
        def end(owner):
            root.call_on_fit_task_end(estimator=owner, X=self._X, y=self._y)

        end(self._owner)


def fit_in(leaf, estimator, fit, X=None, y=None):
    """``fit()`` as the task ``leaf`` of a search (``SearchTask.fits``); None: just ``fit()``.

    The leaf's callbacks reach ``estimator`` (scikit-learn's propagation),
    whose own fit hangs its epochs under the leaf.
    """
    if leaf is None:
        return fit()
    with leaf.propagate_callback_context(estimator):
        leaf.call_on_fit_task_begin(estimator=estimator, X=X, y=y)
        result = fit()
        leaf.call_on_fit_task_end(estimator=estimator, X=X, y=y)
    return result
