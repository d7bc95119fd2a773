"""What a fitted module was built with, what a change of parameter does to it, and undo.

Plain functions of the estimator (``net``). The parameters a module was built with
are recorded (``record_build``) and compared with the current ones (``_rules.group_of``
says which matter): a changed structural parameter makes the estimator read as
unfitted until it is refit or the value is set back; an applied one
(``n_pe_draws``, ``device``, ``compile``) is applied to the fitted module
(``apply_to_fitted``); settings are read where they are used.

:class:`Transaction` puts the estimator back as it was when a call that fails
began: the guarantee of ``fit``, ``partial_fit``, ``initialize`` and ``load_params``.
"""

import copy

import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .._device import move_fitted, resolve_device
from . import _rules

_UNSET = "(unset)"
#: the components of every estimator: built by skorch's initialize, trained in place
COMPONENTS = ("module_", "criterion_", "optimizer_")


def _same(a, b):
    """``a == b`` for parameter values of any kind (arrays, classes, objects)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an array's elementwise ==, or a type that refuses ==
        return False


def structure(net):
    """The structural parameters of ``net`` as they are now."""
    return {name: value for name, value in net.get_params(deep=False).items()
            if _rules.is_structural(name, net)}


def _components(net):
    """What the criterion and optimizer were built from."""
    return {name: value for name, value in net.get_params(deep=False).items()
            if name in ("criterion", "optimizer") or name.startswith("criterion__")}


def record_build(net):
    """Record what the module just built was built with."""
    net._built_with_ = {
        "structure": structure(net), "components": _components(net),
        "compile": net.get_params_for("compile") if net.compile else None,
        "callbacks": net.callbacks,
    }


def structure_changes(net):
    """``(name, built with, now)`` for each structural change since the build."""
    built = net.__dict__.get("_built_with_")
    if built is None or "module_" not in net.__dict__:
        return []
    built, now = built["structure"], structure(net)
    changes = []
    for name in sorted(set(built) | set(now)):
        if name == "n_selected" and not _has_query_rows(now.get("layout")):
            continue  # the indicator layout has no query rows: q shapes nothing
        if name in ("token_dim", "seq_len", "n_selected"):
            # None learns the size: only a given size can differ from the fitted one
            fitted = net.__dict__.get(name + "_")
            if now.get(name) is not None and now[name] != fitted:
                changes.append((name, fitted, now[name]))
        elif not _same(built.get(name, _UNSET), now.get(name, _UNSET)):
            changes.append((name, built.get(name, _UNSET), now.get(name, _UNSET)))
    return changes


def _has_query_rows(layout):
    from .._layout import has_query_rows

    try:
        return has_query_rows(layout)
    except ValueError:  # a bad layout is refused, with its fix, where it is used
        return False


def is_current(net):
    """Whether there is a module to continue from, built as the parameters say."""
    return net.initialized_ and "module_" in net.__dict__ and not structure_changes(net)


def check_fitted(net):
    """Raise ``NotFittedError`` if ``net`` has no module, or one built with other parameters."""
    changes = structure_changes(net)
    if changes:
        what = "; ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes)
        name, old, _ = changes[0]
        raise NotFittedError(
            f"This {type(net).__name__} is not fitted for its current parameters: "
            f"{what} since its module was built. Call fit to train a model with the "
            f"new parameters, or set {name}={old!r} back to use the fitted one."
        )
    check_is_fitted(net)


def applicable(net):
    """Whether the applied parameters pass their rules (a bad one waits for fit or predict)."""
    try:
        _rules.validate(net._parameter_rules,
                        {name: getattr(net, name) for name in net._parameter_rules
                         if _rules.group_of(name, net) == "applied" and name in net.__dict__},
                        type(net).__name__)
        resolve_device(net.__dict__["device"])
    except (ValueError, TypeError):
        return False
    return True


def apply_to_fitted(net):
    """Bring the fitted model in line with the "applied" parameters.

    ``device`` moves the module, optimizer state and training generator;
    module attributes (``n_pe_draws``) are set; ``compile`` compiles or
    un-compiles the module in place. Writes only what differs.
    """
    move_fitted(net, resolve_device(net.__dict__["device"]))
    for name in net._module_attributes:
        if getattr(net.module_, name) != getattr(net, name):
            setattr(net.module_, name, getattr(net, name))
    apply_compile(net)


def apply_compile(net, *, compiled=_UNSET):
    """Compile or un-compile the module and criterion in place, as ``compile`` says.

    ``compiled``: the ``compile`` options the module and criterion are compiled
    with now (None: not compiled), by default those recorded at the build or the
    last call; writes only when they differ from the wanted ones.
    """
    wanted = net.get_params_for("compile") if net.compile else None
    if compiled is _UNSET:
        compiled = net._built_with_["compile"]
    if wanted != compiled:
        for name in ("module_", "criterion_"):
            module = net.__dict__.get(name)
            if not isinstance(module, torch.nn.Module):
                continue
            if wanted is None:
                uncompile(module)
            else:
                module.compile(**wanted)
    if net._built_with_["compile"] != wanted:
        net._built_with_["compile"] = wanted


def uncompile(module):
    """Undo ``nn.Module.compile`` in place: the module as pickling keeps it.

    torch has no public undo; its pickling protocol (``__getstate__``) leaves
    the compiled call out, and ``__setstate__`` puts the rest back: the same
    parameters, buffers, submodules and hooks, the same object.
    """
    state = module.__getstate__()
    module.__dict__.clear()
    module.__setstate__(state)


def rebuild_changed_components(net):
    """Rebuild the criterion, optimizer or callbacks whose parameters changed.

    ``warm_start`` and ``partial_fit`` keep skorch's criterion, optimizer and
    callbacks; those whose parameters changed are rebuilt so that the setting
    is honoured (the weights stay; a rebuilt optimizer's state starts afresh).
    """
    built = net._built_with_
    if not all(_same(value, built["components"].get(name, _UNSET))
               for name, value in _components(net).items()):
        net.initialize_criterion()
        net.initialize_optimizer()
        built["components"] = _components(net)
    if net.callbacks is not built["callbacks"]:
        if net.callbacks == "disable":
            net.callbacks_ = []
        else:
            net.initialize_callbacks()
        built["callbacks"] = net.callbacks


class Transaction:
    """A context manager over everything a failing call may change.

    ``with Transaction(net) as txn:``: if the block raises, the estimator is
    put back as it was when the block began (its ``__dict__``, the weights of
    the module, criterion and optimizer, which training changes in place, the
    history and the training generator). ``txn.rollback()`` puts it back at
    once (the block then changes nothing more on exit); ``txn.commit()`` keeps
    what the block did even if it raises.

    With ``in_place=False`` the block promises to build new components
    rather than change the fitted ones (a fresh ``fit``): only the
    ``__dict__`` and the history's epochs are kept, nothing is copied, until
    ``keep_in_place()`` (training goes on after all) copies the rest.
    """

    def __init__(self, net, *, in_place=True):
        self._net = net
        self._done = False
        self._state = {key: copy.copy(value) if isinstance(value, (dict, set)) else value
                       for key, value in net.__dict__.items()}
        history = net.__dict__.get("history_")
        # skorch's initialize empties the history in place: its epochs are kept
        self._epochs = None if history is None else list(history)
        self._weights, self._history, self._rng = [], None, (None, None)
        if in_place:
            self.keep_in_place()

    def keep_in_place(self):
        """Also keep what training in place changes: the weights, history and generator."""
        net = self._net
        for name in COMPONENTS:
            component = net.__dict__.get(name)
            if hasattr(component, "state_dict"):  # trained in place when training continues
                self._weights.append((component, copy.deepcopy(component.state_dict())))
        self._history = copy.deepcopy(net.__dict__.get("history_"))
        rng = net.__dict__.get("torch_rng_")
        self._rng = (rng, None if rng is None else rng.get_state())

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.rollback()
        return False

    def commit(self):
        """Keep what was done, whatever happens next in the block."""
        self._done = True

    def rollback(self):
        """Put the estimator back as it was when the transaction began (once)."""
        if self._done:
            return
        self._done = True
        net = self._net
        net.__dict__.clear()
        net.__dict__.update(self._state)
        for component, component_state in self._weights:
            component.load_state_dict(component_state)
        if self._history is not None:
            net.__dict__["history_"] = self._history
        elif self._epochs is not None:  # a new object: an error may carry the one trained
            net.__dict__["history_"] = type(net.__dict__["history_"])(self._epochs)
        rng, rng_state = self._rng
        if rng is not None:
            rng.set_state(rng_state)
