"""Where tensors live: the ``device`` argument of the estimators and the data stream."""

import threading
from contextlib import contextmanager

import torch


def resolve_device(device):
    """Map ``"auto"`` to ``"cuda"`` when a GPU is present, else ``"cpu"``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device is None:
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {device!r}."
        ) from exc
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but no CUDA GPU is available; use "
            "device='auto' (GPU when present) or device='cpu'."
        )
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise ValueError(
            f"device={device!r} was requested but only {torch.cuda.device_count()} "
            "CUDA GPU(s) are visible, numbered from 0; use device='cuda' or "
            "device='cuda:N' with N below that count."
        )
    return device


_scopes = threading.local()
_UNRESOLVED = object()


class ResolvedDevice:
    """The ``device`` attribute of an estimator: stored as given, read resolved in a call.

    skorch reads ``self.device`` wherever it places a tensor and does not know
    "auto". As a data descriptor on the class, this hands skorch the resolved
    device while one of the estimator's calls runs (:func:`resolved_device`),
    and the value as given otherwise (``est.device``, ``get_params``, ``clone``
    and pickles see "auto"). The scope is the calling thread's, not the
    estimator's: a call writes nothing to the estimator, so concurrent
    ``predict`` calls cannot see each other's state. A value that does not
    resolve is handed back as is, for the parameter checks to name it.
    """

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        requested = obj.__dict__["device"]
        scope = getattr(_scopes, "active", {}).get(id(obj))
        if scope is None:
            return requested
        if scope[1] != requested:  # resolved once per scope and value: skorch reads it per batch
            try:
                scope[1:] = [requested, resolve_device(requested)]
            except ValueError:
                return requested
        return scope[2]

    def __set__(self, obj, value):
        obj.__dict__["device"] = value


@contextmanager
def resolved_device(obj):
    """Within the block, in this thread, ``obj.device`` reads resolved (re-entrant)."""
    active = _scopes.__dict__.setdefault("active", {})
    scope = active.setdefault(id(obj), [0, _UNRESOLVED, None])  # depth, requested, resolved
    scope[0] += 1
    try:
        yield
    finally:
        scope[0] -= 1
        if not scope[0]:
            del active[id(obj)]


def same_device(a, b):
    """Whether devices ``a`` and ``b`` are the same (``"cuda"`` is the current GPU)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


def generator_on(kind, state, device):
    """A generator on ``device`` continuing one of device type ``kind`` whose
    state is ``state``: that state where the kinds agree, else seeded from it."""
    moved = torch.Generator(device=device)
    if moved.device.type == kind:
        moved.set_state(state)
    else:  # CPU and CUDA generators have different states
        moved.manual_seed(int(state.sum()))
    return moved


def move_fitted(net, device):
    """Move a fitted net's modules, optimizer state and training generator to ``device``.

    In place: the optimizers keep their parameters. Nothing moves when the
    module is already there, or when ``device`` is None (skorch's "leave the
    tensors where they are").
    """
    if device is None:
        return
    tensors = [*net.module_.parameters(), *net.module_.buffers()]
    if not tensors or same_device(tensors[0].device, device):
        return
    for component in (net.module_, getattr(net, "criterion_", None)):
        if isinstance(component, torch.nn.Module):
            component.to(device)
    optimizer = getattr(net, "optimizer_", None)
    if optimizer is not None:  # loading casts its state to the parameters' device
        optimizer.load_state_dict(optimizer.state_dict())
    rng = net.torch_rng_
    net.torch_rng_ = generator_on(rng.device.type, rng.get_state(), device)
