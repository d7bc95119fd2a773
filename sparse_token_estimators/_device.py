"""Where tensors live: the ``device`` argument of the estimators and the data stream."""

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


def _generator_on(kind, state, device):
    """A generator on ``device`` continuing one of device type ``kind`` whose
    state is ``state``: that state where the kinds agree, else seeded from it."""
    moved = torch.Generator(device=device)
    if moved.device.type == kind:
        moved.set_state(state)
    else:  # CPU and CUDA generators have different states
        moved.manual_seed(int(state.sum()))
    return moved
