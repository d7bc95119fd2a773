"""What a fitted module was built with, and what ``set_params`` does to it.

One mixin, :class:`FittedStateMixin`, of the estimators' base class. It
records the parameters a module was built with and compares them with the
current ones (``_params.GROUPS`` says which matter): a changed structural
parameter makes the estimator read as unfitted until it is refit or the value
is set back; an applied one (``n_pe_draws``, ``device``, ``compile``) is
applied to the fitted module by ``set_params``; settings are read where they
are used. The promises are README's "Changing a fitted estimator".
"""

import copy

import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from . import _params
from ._device import move_fitted, resolve_device

_UNSET = "(unset)"


def _same(a, b):
    """``a == b`` for parameter values of any kind (arrays, classes, objects)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an array's elementwise ==, or a type that refuses ==
        return False


class FittedStateMixin:
    """Track what the fitted module was built with; apply or defer ``set_params``.

    The class using it declares ``_module_attributes``: applied parameters
    that are attributes of the module (set on the fitted one).
    """

    _module_attributes = ()

    def __sklearn_is_fitted__(self):
        # skorch: fitted once a module exists. Here also: built with the
        # current structural parameters.
        return super().__sklearn_is_fitted__() and not self._structure_changes()

    def _structure(self):
        return {name: value for name, value in self.get_params(deep=False).items()
                if _params.is_structural(name)}

    def _components(self):
        """What the criterion and optimizer were built from."""
        return {name: value for name, value in self.get_params(deep=False).items()
                if name in ("criterion", "optimizer") or name.startswith("criterion__")}

    def _record_build(self):
        self._built_with_ = {
            "structure": self._structure(), "components": self._components(),
            "compile": self.get_params_for("compile") if self.compile else None,
            "callbacks": self.callbacks,
        }

    def _structure_changes(self):
        """``(name, built with, now)`` for each structural change since the build."""
        built = self.__dict__.get("_built_with_")
        if built is None or "module_" not in self.__dict__:
            return []
        built, now = built["structure"], self._structure()
        changes = []
        for name in sorted(set(built) | set(now)):
            if name == "n_selected" and now.get("layout") != "query":
                continue  # the indicator layout has no query rows: q shapes nothing
            if name in ("token_dim", "seq_len", "n_selected"):
                # None learns the size: only a given size can differ from the fitted one
                fitted = self.__dict__.get(name + "_")
                if now.get(name) is not None and now[name] != fitted:
                    changes.append((name, fitted, now[name]))
            elif not _same(built.get(name, _UNSET), now.get(name, _UNSET)):
                changes.append((name, built.get(name, _UNSET), now.get(name, _UNSET)))
        return changes

    def _is_current(self):
        """Whether there is a module to continue from, built as the parameters say."""
        return self.initialized_ and "module_" in self.__dict__ and not self._structure_changes()

    def _check_fitted(self):
        changes = self._structure_changes()
        if changes:
            what = "; ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes)
            name, old, _ = changes[0]
            raise NotFittedError(
                f"This {type(self).__name__} is not fitted for its current parameters: "
                f"{what} since its module was built. Call fit to train a model with the "
                f"new parameters, or set {name}={old!r} back to use the fitted one."
            )
        check_is_fitted(self)

    # -- set_params ---------------------------------------------------------------

    def set_params(self, **params):
        """Set parameters; nothing that is fitted is rebuilt or lost here.

        On a fitted estimator skorch's own ``set_params`` rebuilds the module
        (fresh weights) for ``module__*`` and ``compile``, the criterion and
        optimizer for ``criterion__*``, and the callbacks for ``callbacks``
        (and refuses ``iterator_train__*``). Here every parameter is recorded,
        so that ``get_params``, ``clone`` and the next ``fit`` see it:

        - a structural change (``_params.GROUPS``) makes the estimator read
          as unfitted until the next ``fit`` (or until the value is set back);
        - an applied one (``n_pe_draws``, ``device``, ``compile``) is applied
          to the fitted module here, weights kept;
        - settings are read where they are used (a changed criterion or
          callback list is rebuilt when training continues); ``lr`` and
          ``optimizer__*`` also reach the live optimizer at once, and
          ``callbacks__*`` the live callbacks, as in skorch.

        On a fitted estimator the values of ``optimizer__*`` and
        ``criterion__*`` are checked first (on a scratch optimizer or
        criterion), so that a bad value is refused here and reaches neither
        the live optimizer nor ``get_params``. Other values are checked, as
        in scikit-learn, when they are used (``fit``, ``predict``).

        Parameters
        ----------
        **params : dict
            Parameter names (``name`` or routed ``prefix__name``) and values.

        Returns
        -------
        self : estimator
            This estimator.
        """
        if self.initialized_:
            routed = {k: v for k, v in params.items()
                      if k.startswith(("optimizer__", "criterion__"))}
            if routed:  # against the optimizer and criterion this call sets, if it sets them
                _params.check_components(self, {**routed, **{
                    k: v for k, v in params.items() if k in ("optimizer", "criterion", "lr")}})
        deferred = {key: value for key, value in params.items()
                    if key == "callbacks" or self._is_deferred(key)}
        super().set_params(**{k: v for k, v in params.items() if k not in deferred})
        for key, value in deferred.items():
            setattr(self, key, value)
            if "__" in key:  # skorch checks routed names when training starts
                self._params_to_validate.add(key)
        for key, value in params.items():
            if key.startswith("optimizer__") and self._is_virtual_param(key):
                # skorch gives these to the live optimizer only; record them too,
                # so that get_params, clone and the next fit see them
                self.__dict__[key] = value
        if "module_" in self.__dict__ and self._applicable():
            self._apply_to_fitted()
        return self

    def _applicable(self):
        # a bad applied value (device="tpu") is refused, with its fix, at the
        # next fit or predict; set_params records it, as for any parameter
        try:
            self._check_params([name for name, group in _params.GROUPS.items()
                                if group == "applied"])
        except (ValueError, TypeError):
            return False
        return True

    def _is_deferred(self, key):
        # skorch's "special" parameters: those it would act on by rebuilding
        if self._is_virtual_param(key) or key.startswith("callbacks"):
            return False
        return "__" in key or any(key.startswith(prefix) for prefix in self.prefixes_)

    # -- applying parameters to a fitted model ------------------------------------

    def _apply_to_fitted(self):
        """Bring the fitted model in line with the "applied" parameters.

        ``device`` moves the module, optimizer state and training generator;
        module attributes (``n_pe_draws``) are set; ``compile`` compiles or
        un-compiles the module in place. Writes only what differs.
        """
        move_fitted(self, resolve_device(self.__dict__["device"]))
        for name in self._module_attributes:
            if getattr(self.module_, name) != getattr(self, name):
                setattr(self.module_, name, getattr(self, name))
        self._apply_compile()

    def _apply_compile(self):
        wanted = self.get_params_for("compile") if self.compile else None
        for name in self._modules + self._criteria:
            module = getattr(self, name + "_", None)
            if not isinstance(module, torch.nn.Module):
                continue
            # torch has no public way to undo nn.Module.compile or to ask whether
            # it ran: it keeps the compiled call here (and unpickling drops it)
            compiled = getattr(module, "_compiled_call_impl", None) is not None
            if wanted is None and compiled:
                module._compiled_call_impl = None
            elif wanted is not None and (not compiled or wanted != self._built_with_["compile"]):
                module.compile(**wanted)
        if self._built_with_["compile"] != wanted:
            self._built_with_["compile"] = wanted

    def __setstate__(self, state):
        built = state.get("_built_with_")
        if built is not None:
            # pickled before the query layout: built in the indicator layout
            built["structure"].setdefault("layout", "indicator")
            built["structure"].setdefault("n_selected", None)
        for name, default in (("layout", "indicator"), ("n_selected", None)):
            state.setdefault(name, default)
        if "module_" in state:
            state.setdefault("n_selected_", None)
        super().__setstate__(state)
        if "module_" in self.__dict__ and "_built_with_" in self.__dict__:
            self._apply_compile()  # unpickling drops nn.Module.compile's compiled call

    def _rebuild_changed_components(self):
        # warm_start / partial_fit keep skorch's criterion, optimizer and
        # callbacks; those whose parameters changed are rebuilt, so that the
        # setting is honoured (the weights stay; a rebuilt optimizer's state
        # starts afresh).
        built = self._built_with_
        if not all(_same(value, built["components"].get(name, _UNSET))
                   for name, value in self._components().items()):
            self._initialize_criterion()
            self._initialize_optimizer()
            built["components"] = self._components()
        if self.callbacks is not built["callbacks"]:
            self._initialize_callbacks()
            built["callbacks"] = self.callbacks

    # -- transactions -------------------------------------------------------------

    def _transaction(self):
        """A transaction over everything a failing call may change.

        ``with self._transaction() as txn:``: if the block raises, the
        estimator is put back as it was when the block began (its
        ``__dict__``, the weights of the module, criterion and optimizer,
        which training changes in place, the history and the training
        generator). ``txn.rollback()`` puts it back at once (the block then
        changes nothing more on exit); ``txn.commit()`` keeps what the block
        did even if it raises. ``initialize``, ``fit``, ``partial_fit`` and
        ``load_params`` run in one.
        """
        return _Transaction(self)


class _Transaction:
    """What ``FittedStateMixin._transaction`` returns (a context manager)."""

    def __init__(self, net):
        self._net = net
        self._done = False
        self._state = {key: copy.copy(value) if isinstance(value, (dict, set)) else value
                       for key, value in net.__dict__.items()}
        self._weights = []
        for name in net._modules + net._criteria + net._optimizers:
            component = net.__dict__.get(name + "_")
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
        net.__dict__["history_"] = self._history
        rng, rng_state = self._rng
        if rng is not None:
            rng.set_state(rng_state)
