"""Saving and loading: weights that say what made them, all-or-nothing loads, atomic writes.

- **Metadata.** A weights file (``f_params``) records the estimator class, the
  parameters that shape its module (every *structural* parameter,
  ``_rules.group_of``, with the sizes the module was built with) and the
  format version: in a torch file under ``METADATA_KEY`` beside the root
  module's own metadata in the state_dict (where torch keeps each module's
  version, so the file is still a plain state_dict), in a safetensors file in
  its ``__metadata__`` header. An estimator of another architecture declares
  nothing more: its structural parameters are its metadata.
- **Loads are transactional.** ``load_params`` reads every file into memory,
  decodes it, checks the metadata against the estimator's parameters, the
  keys and shapes against its module and optimizer, and only then applies
  them; if applying fails, everything is put back.
- **Writes are atomic** (``.._files.write_files``): a crash, a kill or a full
  disk leaves the old file or the new one; a failed save raises an
  ``OSError`` that names the path, the cause and the fix.
"""

import contextlib
import contextvars
import errno
import inspect
import json
import numbers
import os
import warnings

import torch
from skorch import callbacks as skorch_callbacks
from skorch.exceptions import NotInitializedError

from .._device import generator_on, resolve_device
from .._files import (
    METADATA_KEY,
    history_bytes,
    is_path,
    read_bytes,
    read_history,
    read_state,
    remove_stale_temporaries,
    state_bytes,
    write_files,
)
from ..exceptions import CheckpointWarning
from . import _rules, _state

#: True while this thread runs an estimator's fit or partial_fit (callbacks saving)
FITTING = contextvars.ContextVar("sparse_token_estimators_fitting", default=False)
#: format of the metadata written with weights and of checkpoint manifests
FORMAT_VERSION = 1
#: format of what ``__getstate__`` writes (the CHANGELOG says what each one holds)
_PICKLE_FORMAT = 2


@contextlib.contextmanager
def fitting():
    """Within the block, this thread runs a fit (a save that fails warns, see below)."""
    token = FITTING.set(True)
    try:
        yield
    finally:
        FITTING.reset(token)


# -- metadata ------------------------------------------------------------------------


def _plain(value):
    """A JSON-able stand-in for a parameter value (a class by its qualified name)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if inspect.isclass(value):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return repr(value)


def _signature(values):
    return ", ".join(f"{name}={value!r}" for name, value in values.items())


# -- metadata -------------------------------------------------------------------


def weights_metadata(net):
    """What makes the module: class, structural parameters, sizes, format.

    A size left at None (learned at fit) is the one the module was built with.
    """
    params = net.get_params(deep=False)
    checked = {}
    for name, value in params.items():
        if not _rules.is_structural(name, net):
            continue
        if name == "n_selected" and params.get("layout") != "query":
            continue  # shapes nothing in the indicator layout
        if value is None:
            value = net.__dict__.get(name + "_")
        checked[name] = _plain(value)
    recorded = {name: _plain(params[name]) for name in getattr(net, "_module_params", ())
                if name in params and name not in checked}
    if "seq_len" not in checked and net.__dict__.get("seq_len_") is not None:
        recorded["seq_len"] = net.seq_len_  # the length trained on
    from .. import __version__

    return {"format": FORMAT_VERSION, "estimator": type(net).__name__,
            "version": __version__, "params": checked, "recorded": recorded}


def _check_metadata(net, saved, what):
    """Refuse weights whose metadata differs from this estimator's parameters."""
    if not isinstance(saved, dict) or not isinstance(saved.get("params"), dict):
        raise ValueError(f"{what} has metadata under '{METADATA_KEY}' that this package "
                         "did not write (no \"params\" record): the file was edited, or "
                         "written by another program. Nothing was loaded; the estimator "
                         "is unchanged. Pass a file written by save_params.")
    version = saved.get("format", 0)
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise ValueError(f"{what} has metadata under '{METADATA_KEY}' whose \"format\" is "
                         f"{version!r}, not the integer save_params writes: the file was "
                         "edited or damaged. Nothing was loaded; the estimator is "
                         "unchanged. Save the weights again with save_params.")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{what} was written by a newer sparse_token_estimators "
            f"({saved.get('version')}, format {saved['format']}); this version reads "
            f"format {FORMAT_VERSION}. Nothing was loaded. Upgrade the package to load it."
        )
    ours = weights_metadata(net)
    # weights saved before the query layout were saved in the indicator layout
    saved = {**saved, "params": {"layout": "indicator", **saved["params"]}}
    kind, mine = saved.get("estimator"), type(net).__name__
    differences, fix = [], {}
    if kind != mine:  # every parameter differs: name the kind, construct it whole
        differences.append(f"estimator: saved {kind}, this is a {mine}")
        fix = {name: value for name, value in saved["params"].items() if name != "module"
               and (name, value) != ("layout", "indicator")}  # the default, unsaid
    else:
        names = [*saved["params"], *(n for n in ours["params"] if n not in saved["params"])]
        for name in names:
            old = saved["params"].get(name, "(none)")
            new = ours["params"].get(name, "(none)")
            if old != new:
                differences.append(f"{name}: saved {old!r}, this estimator {new!r}")
                if name in saved["params"]:
                    fix[name] = old
    if not differences:
        return
    construct = f"{kind}({_signature(fix)})"
    layouts = (saved["params"].get("layout"), ours["params"].get("layout"))
    if kind == mine and layouts[0] != layouts[1]:
        differences.append(
            f"(the layout says what the rows of X are: weights trained on the "
            f"{layouts[0]} layout do not read the {layouts[1]} layout's rows; "
            "to_query_layout and to_indicator_layout convert the data)")
    raise ValueError(
        f"Cannot load {what} into this {mine}: the weights were saved by a {kind} with "
        f"other parameters:\n  " + "\n  ".join(differences) + "\nNothing was loaded; the "
        f"estimator is unchanged. Construct {construct} (with your other parameters) and "
        "call initialize() before load_params" + (
            f", or call set_params({_signature(fix)}) on this one and load again."
            if kind == mine else ".")
    )


# -- saving ----------------------------------------------------------------------


def _component(net, key, action):
    """The module, criterion or optimizer that ``f_<name>`` names."""
    name = "module" if key in ("f_params", "f_module") else key[2:]
    component = getattr(net, name + "_", None)
    if component is None or not hasattr(component, "state_dict"):
        if not net.initialized_:
            raise NotInitializedError(
                f"Cannot {action} the state of an un-initialized {type(net).__name__}. "
                "Build its module first: call initialize() (with the sizes given, e.g. "
                "token_dim=...) or fit(X, y)."
            )
        raise AttributeError(
            f"{action}_params got {key}, but this {type(net).__name__} has no "
            f"{name}_ module or optimizer to {action}: check the name for typos."
        )
    return component


def _file_keys(net, caller, kwargs):
    for key in kwargs:
        if not key.startswith("f_"):
            raise TypeError(f"{caller} got an unexpected argument '{key}', did you mean "
                            f"'f_{key}'?")
        if key == "f_pickle":
            raise TypeError(f"{caller} does not take f_pickle; pickle the whole "
                            "estimator with pickle.dump(est, file) instead.")
    if kwargs.get("f_params") is not None and kwargs.get("f_module") is not None:
        raise TypeError(f"{caller} called with both f_params and f_module, please "
                        "choose one")
    return {key: value for key, value in kwargs.items() if value is not None}


def state_files(net, files, use_safetensors=False):
    """``{f_key: bytes}``: what ``save_params(**files)`` writes, serialised in memory."""
    out = {}
    for key in files:
        if key == "f_history":
            out[key] = history_bytes(net.history)
            continue
        target = _component(net, key, "save")
        metadata = None
        if key in ("f_params", "f_module"):
            changes = _state.structure_changes(net)
            if changes:
                what = ", ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes)
                raise ValueError(
                    f"Cannot save the weights of this {type(net).__name__}: its "
                    f"parameters changed since its module was built ({what}), so they "
                    "no longer say what made the weights. Set them back, or fit, "
                    "before saving."
                )
            metadata = weights_metadata(net)
        out[key] = state_bytes(target, use_safetensors, metadata)
    return out


def save(net, files, use_safetensors=False):
    """Write ``files`` (``{f_key: path or file}``) of ``net`` (its ``save_params``)."""
    files = _file_keys(net, "save_params", files)
    if not files:
        if net.verbose:
            print("Nothing to save")
        return
    data = state_files(net, files, use_safetensors)  # everything serialised first
    names = {"f_params": "the weights (f_params)", "f_module": "the weights (f_module)",
             "f_history": "the history (f_history)"}
    try:
        write_files([(files[key], data[key], names.get(key, key)) for key in files
                     if is_path(files[key])])
    except OSError as exc:
        _warn_swallowed_save(net, files, exc)
        raise
    for key, f in files.items():
        if not is_path(f):  # a file object: written as given, not atomic
            f.write(data[key])


def _warn_swallowed_save(net, files, exc):
    """Warn when skorch's own ``Checkpoint`` is saving: it would swallow ``exc``.

    skorch's ``Checkpoint`` catches a failed ``save_params``, prints it
    only when ``verbose``, and has already recorded the epoch as
    checkpointed. During a fit, a failure whose path is one of such a
    callback's files warns with ``CheckpointWarning`` and records the
    epoch's event as False.
    """
    if not FITTING.get():
        return
    paths = {os.path.abspath(os.fspath(f)) for f in files.values() if is_path(f)}
    for name, callback in getattr(net, "callbacks_", []):
        if (not isinstance(callback, skorch_callbacks.Checkpoint)
                or hasattr(callback, "saved_files")):  # the package's warn themselves
            continue
        try:
            targets = {os.path.abspath(os.fspath(f))
                       for f in callback.get_formatted_files(net).values() if is_path(f)}
        except Exception:  # a callback set up in some other way: not the one saving
            continue
        if not paths & targets:
            continue
        event = callback.event_name
        if event is not None and len(net.history):
            net.history.record(event, False)
        warnings.warn(
            f"Callback {name!r} (skorch's Checkpoint) could not save epoch "
            f"{len(net.history)}: {exc} skorch's Checkpoint would go on silently (it "
            "prints this only when verbose)" + (f"; {event!r} is recorded False for this "
                                                "epoch" if event is not None else "")
            + ". Use sparse_token_estimators.checkpoints.Checkpoint (the same "
            "arguments): its saves are atomic, keep the previous checkpoint loadable "
            "and warn when they fail.", CheckpointWarning, stacklevel=2)
        return


# -- loading ---------------------------------------------------------------------


def _sources(net, checkpoint, files):
    """``{f_key: (what, bytes)}`` to load, every file read into memory."""
    sources, formats = {}, {}
    if checkpoint is not None:
        saved = checkpoint.saved_files() if hasattr(checkpoint, "saved_files") else None
        if saved is None:  # skorch's own Checkpoint, or one written before manifests
            sources = _legacy_checkpoint(net, checkpoint)
        else:
            sources = {key: (what, data) for key, (what, data) in saved["files"].items()
                       if key != "f_pickle"}
            formats = dict.fromkeys(sources, saved["use_safetensors"])
    for directory in {os.path.dirname(os.fspath(f)) for f in files.values() if is_path(f)}:
        remove_stale_temporaries(directory)  # what killed writes left there
    for key, f in files.items():
        sources[key] = (f"{key} '{os.fspath(f)}'" if is_path(f) else key,
                        read_bytes(f, key))
        formats.pop(key, None)
    return sources, formats


def _legacy_checkpoint(net, checkpoint):
    # skorch's route: the history names the epoch whose files to load
    what = f"f_history '{checkpoint.f_history_}'"
    sources = {}
    if checkpoint.f_history is not None:
        try:
            sources["f_history"] = (what, read_bytes(checkpoint.f_history_, "f_history"))
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, f"No checkpoint to load: neither a manifest nor {what} "
                "exists (no epoch was checkpointed yet, or dirname is another one)."
            ) from None
    live = net.__dict__.get("history_")
    if "f_history" in sources:
        net.history_ = read_history(sources["f_history"][1], what)
    try:
        named = checkpoint.get_formatted_files(net)
    finally:
        net.history_ = live
    for key, f in named.items():
        if f is not None and key not in ("f_history", "f_pickle"):
            sources[key] = (f"{key} '{f}'", read_bytes(f, key))
    return sources


def load(net, files, checkpoint=None, use_safetensors=False):
    """Load ``files`` (``{f_key: path or file}``) or ``checkpoint`` into ``net``, all or nothing."""
    # skorch reads net.device while it loads: resolved in this call only
    with net.device_scope():
        files = _file_keys(net, "load_params", files)
        if checkpoint is None and not net.initialized_ and files:
            _component(net, next(iter(files)), "load")  # skorch's "initialize first"
        sources, formats = _sources(net, checkpoint, files)
        if not sources:
            if net.verbose:
                print("Nothing to load")
            return net
        decoded = {key: _decode(key, what, data, formats.get(key, use_safetensors),
                                net.torch_load_kwargs)
                   for key, (what, data) in sources.items()}
        for key in ("f_params", "f_module"):
            if key in decoded and decoded[key][1] is not None:
                _check_metadata(net, decoded[key][1], sources[key][0])
        with _state.Transaction(net):
            if not net.initialized_ or _state.structure_changes(net):
                net.initialize()
            targets = {key: _component(net, key, "load")
                       for key in decoded if key != "f_history"}
            for key, target in targets.items():
                recorded = key in ("f_params", "f_module") and decoded[key][1] is not None
                _check_fits(target, decoded[key][0], sources[key][0], net, recorded)
            for key, target in targets.items():
                target.load_state_dict(decoded[key][0])
            if "f_history" in decoded:
                net.history = decoded["f_history"]
    return net


# -- pickling ---------------------------------------------------------------------


def pickled(state):
    """``state`` (skorch's ``__getstate__``) with the format and the generator's state."""
    state["_pickle_format_"] = _PICKLE_FORMAT
    rng = state.pop("torch_rng_", None)
    if rng is not None:
        state["_torch_rng_state_"] = (rng.device.type, rng.get_state())
    return state


def unpickle(net, state, setstate):
    """Restore ``net`` from ``state`` with skorch's ``setstate``, "auto" device kept."""
    if state.pop("_pickle_format_", 1) < _PICKLE_FORMAT:
        _upgrade_state(net, state)
    built = state.get("_built_with_")
    if built is not None:
        # pickled before the query layout: built in the indicator layout
        built["structure"].setdefault("layout", "indicator")
        built["structure"].setdefault("n_selected", None)
    for name, default in (("layout", "indicator"), ("n_selected", None)):
        state.setdefault(name, default)
    if built is not None:  # fitted
        state.setdefault("n_selected_", None)
    requested = state["device"]
    state["device"] = resolve_device(requested) if requested == "auto" else requested
    rng_state = state.pop("_torch_rng_state_", None)
    setstate(state)
    if requested == "auto":
        net.__dict__["device"] = "auto"
    if rng_state is not None:
        net.torch_rng_ = generator_on(*rng_state, resolve_device(net.device))
    if "module_" in net.__dict__ and "_built_with_" in net.__dict__:
        # unpickling drops nn.Module.compile's compiled call: compile again if asked
        _state.apply_compile(net, compiled=None)


def _upgrade_state(net, state):
    """Read a pickle of an older format, whose fitted state this version cannot use."""
    if state.get("initialized_"):
        raise ValueError(
            f"This {type(net).__name__} was pickled fitted by "
            "sparse_token_estimators 0.1.0, whose fitted state (the module, the "
            "saved prediction seed, the parameters it was built with) this "
            "version does not read. Refit it from its parameters, or load its "
            "weights into an estimator built with the same parameters and "
            "random_state (see the 0.1.0 entry of CHANGELOG.md)."
        )
    # Unfitted: only parameters, and those added since take their defaults.
    for name, param in inspect.signature(type(net).__init__).parameters.items():
        if param.default is not param.empty:
            state.setdefault(name, param.default)


def _decode(key, what, data, use_safetensors, torch_load_kwargs):
    """The history, or ``(state_dict, metadata)``, of one file; errors name the file."""
    if key == "f_history":
        return read_history(data, what)
    try:
        return read_state(data, what, use_safetensors, torch_load_kwargs)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{what} has metadata under '{METADATA_KEY}' that is not JSON ({exc}): the file "
            "was edited or damaged. Nothing was loaded; the estimator is unchanged. Save the "
            "weights again with save_params."
        ) from None
    except ValueError:
        raise
    except Exception as exc:  # safetensors raises its own SafetensorError, naming no file
        kind = "safetensors" if use_safetensors else "torch"
        raise ValueError(
            f"{what} could not be read as a {kind} file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}): it is damaged or truncated. Nothing was "
            "loaded; the estimator is unchanged. Save the weights again with save_params."
        ) from None


def _shape(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _check_fits(component, state, what, net, recorded=False):
    """Refuse ``state`` if its keys or shapes do not fit ``component``; change nothing.

    ``recorded``: the file's metadata named parameters that matched this
    estimator's, so keys or shapes that differ mean the file is not what its
    metadata says.
    """
    if isinstance(component, torch.optim.Optimizer):
        return _check_optimizer_fits(component, state, what)
    expected = component.state_dict()
    # a key the module fills in itself when absent (the encoder's pe_scale, saved
    # since its input scale: older weights load at the scale they were trained at)
    optional = {key for key in expected if key.rsplit(".", 1)[-1] == "pe_scale"}
    missing = [key for key in expected if key not in state and key not in optional]
    unexpected = [key for key in state if key not in expected]
    shapes = [f"{key}: saved {_shape(state[key])}, this module {_shape(expected[key])}"
              for key in expected if key in state and _shape(state[key]) != _shape(expected[key])]
    if not (missing or unexpected or shapes):
        return
    found = [f"missing keys {missing}"] if missing else []
    found += [f"unexpected keys {unexpected}"] if unexpected else []
    found += [f"shapes differ ({'; '.join(shapes)})"] if shapes else []
    if recorded:
        raise ValueError(
            f"Cannot load {what} into this {type(net).__name__}: its metadata records the "
            "parameters of this estimator, but its weights do not fit its "
            f"{type(component).__name__}: {', '.join(found)}. The metadata was edited or the "
            "weights were replaced after save_params wrote the file. Nothing was loaded; the "
            "estimator is unchanged. Load the file as save_params wrote it, or save the "
            "weights again."
        )
    raise ValueError(
        f"Cannot load {what} into this {type(net).__name__}: it does not fit its "
        f"{type(component).__name__}: {', '.join(found)}. The file records no parameters "
        "(saved by sparse_token_estimators 0.1.0, skorch or another program). Nothing was "
        "loaded; the estimator is unchanged. Construct the estimator with the parameters "
        "these weights were trained with (positional_encoding, pe_dim, max_seq_len, "
        "output_map, hidden_width, ... as the keys and shapes above suggest), call "
        "initialize() and load again; then save_params records them."
    )


#: what torch's learning-rate schedulers add to an optimizer's param groups (``initial_lr``
#: of every one of them, the bounds of ``OneCycleLR`` and ``CyclicLR``): the same optimizer
#: with or without a scheduler
_SCHEDULER_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "base_lr", "max_momentum",
                             "base_momentum"})


def _settings(group):
    """A param group's settings, less ``params`` and what a scheduler adds."""
    return set(group) - {"params"} - _SCHEDULER_KEYS


def _check_optimizer_fits(optimizer, state, what):
    groups = optimizer.state_dict()["param_groups"]
    saved = state.get("param_groups") if isinstance(state, dict) else None
    problem = None
    if not isinstance(saved, list) or "state" not in state:
        problem = "it is not an optimizer state (no param_groups / state)"
    elif [len(g["params"]) for g in saved] != [len(g["params"]) for g in groups]:
        problem = (f"it has {[len(g['params']) for g in saved]} parameters per group, this "
                   f"optimizer {[len(g['params']) for g in groups]}")
    elif any(_settings(a) != _settings(b) for a, b in zip(saved, groups)):
        problem = (f"its settings {sorted(_settings(saved[0]))} are those of another "
                   f"optimizer than this {type(optimizer).__name__} "
                   f"({sorted(_settings(groups[0]))})")
    else:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        ids = [i for group in saved for i in group["params"]]
        for index, param in zip(ids, params):
            for name, value in state["state"].get(index, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    problem = (f"its {name} of parameter {index} has shape "
                               f"{tuple(value.shape)}, the parameter {tuple(param.shape)}")
    if problem:
        raise ValueError(
            f"Cannot load {what} into this {type(optimizer).__name__}: {problem}. Nothing was "
            "loaded; the estimator is unchanged. Load the optimizer state saved with these "
            "weights, with the same optimizer class."
        )
