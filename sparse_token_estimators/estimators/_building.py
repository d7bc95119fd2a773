"""How an estimator builds its module: from the parameters alone, seeded.

``BuildingMixin`` is the part of ``_base._SparseTokenRegressor`` that builds:
``initialize`` (without data, from the sizes given as parameters), the sizes
it needs, the seeds a build draws from ``random_state`` and the module built
from the seeded generator; ``torch_compile`` compiles it in place.
"""

import threading

import numpy as np
import torch
from sklearn.utils import check_random_state

from .. import _layout
from . import _checks, _state

#: Held while a module is built from the seeded global RNG (``initialize_module``).
#: torch has one default generator per process: two threads building modules at
#: once (a threaded joblib or Dask search) would otherwise interleave their draws.
_GLOBAL_RNG_LOCK = threading.Lock()


class BuildingMixin:
    """Building the module (a mixin of skorch's ``NeuralNet``: ``super().initialize()``
    is skorch's)."""

    def initialize(self):
        """Build the module from the parameters alone, without data.

        Needs the sizes as parameters (``token_dim``, and for the FCN
        ``seq_len``), or a previous fit that learned them. This is skorch's
        route for loading weights: ``Estimator(..., token_dim=8).initialize()
        .load_params(f_params="weights.pt")``. A call that fails leaves the
        estimator as it was.

        Returns
        -------
        self : estimator
            This estimator, with a freshly built (untrained) module.
        """
        # the sizes come from the parameters (braindecode's route), not from data
        _checks.check_params(self)
        sizes = self._sizes_from_params()
        with _state.Transaction(self, in_place=False), self.device_scope():  # all built anew
            self._build(sizes)
            self.module_.eval()  # so that predict writes nothing, not even the mode
        return self

    def _sizes_from_params(self):
        sizes = {name: getattr(self, name, None) for name in ("token_dim", "seq_len")}
        for name, value in sizes.items():
            if value is None:  # re-initialising keeps the sizes a fit learned
                sizes[name] = self.__dict__.get(name + "_")
        missing = [name for name in self._sizes if sizes[name] is None]
        if missing:
            given = ", ".join(f"{name}=..." for name in missing)
            raise ValueError(
                f"{type(self).__name__}.initialize() builds the module from the "
                f"parameters, without data, and {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} None (learned from X at fit). "
                f"Pass {given} to the constructor or set_params (e.g. "
                f"{type(self).__name__}({', '.join(f'{n}=8' for n in missing)})"
                ".initialize()), or call fit(X, y)."
            )
        return sizes["token_dim"], sizes["seq_len"], self._n_selected_from_params()

    def _n_selected_from_params(self):
        # The query layout's q says where the tokens end (T = rows - q): a size
        # the module needs, as token_dim; the indicator layout has none.
        if not _layout.has_query_rows(self.layout):
            return None
        n_selected = self.n_selected
        if n_selected is None:
            n_selected = self.__dict__.get("n_selected_")
        if n_selected is None:
            raise ValueError(
                f"{type(self).__name__}.initialize() builds the module without data, and "
                "in the query layout it needs n_selected, the number q of query rows "
                "after the tokens (learned from X at fit when None). Pass n_selected=... "
                f"(e.g. {type(self).__name__}(layout='query', n_selected=3, ...)."
                "initialize()), or call fit(X, y)."
            )
        return n_selected

    def _build(self, sizes):
        """Seed, record the sizes, and build everything with skorch's ``initialize``."""
        rng = check_random_state(self.random_state)
        self._seeds_ = rng.randint(np.iinfo(np.int32).max, size=3).tolist()
        self.token_dim_, self.seq_len_, self.n_selected_ = sizes
        self.n_features_in_ = self.token_dim_ + 1
        super().initialize()
        self.torch_rng_ = torch.Generator(device=self.device).manual_seed(self._seeds_[1])
        _state.record_build(self)
        return self

    def initialize_module(self):
        """Build ``module_`` from the parameters and the fitted sizes, seeded.

        Returns
        -------
        self : estimator
        """
        # the module's arguments are the top-level parameters plus the fitted sizes
        kwargs = {**self._module_kwargs(), **self.get_params_for("module")}
        # Seeded without touching the global RNG: the module is built on the CPU;
        # torch.manual_seed would also reseed every GPU. The lock makes this
        # safe from threads: the global generator is shared.
        with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self._seeds_[0])
            self.module_ = self.initialized_instance(self.module, kwargs)
        return self

    def torch_compile(self, module, name):
        """Compile ``module`` in place when ``compile=True``; return it.

        In place (``nn.Module.compile``) rather than skorch's wrapper object:
        ``module_`` stays the module itself, with the ``state_dict`` keys of an
        uncompiled one (weights load whatever either side's ``compile``), and
        compile can be switched on and off on a fitted model.

        Parameters
        ----------
        module : torch.nn.Module
            The module (or criterion) just built.
        name : str
            Its name (``"module"``, ``"criterion"``).

        Returns
        -------
        module : torch.nn.Module
            The same object.
        """
        # skorch wraps the module in another object: its state_dict keys would change
        if self.compile:
            module.compile(**self.get_params_for("compile"))
        return module
