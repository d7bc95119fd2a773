"""The package's files: atomic writes, and states read back with errors that say what was found.

- ``write_files`` writes each file to a temporary file beside its target,
  flushes and fsyncs it, and ``os.replace``-s it over the target only when
  every file of the call is written: a crash, a kill or a full disk leaves
  the old files or the new ones, never a torn one. A failure raises an
  ``OSError`` (the errno's subclass) naming the path, the cause and the fix.
  Files get the umask's mode (``0o666 & ~umask``); the temporary files are
  named ``.<name>.<8 hex digits>.tmp`` (``is_temporary``), and those a killed
  write left are removed at the next save or load in that directory
  (``remove_stale_temporaries``).
- ``state_bytes`` / ``read_state`` serialise a state_dict with its metadata
  in either format (torch: beside the root module's own metadata in the
  state_dict, where torch keeps each module's version, written and read
  through torch's state_dict hooks; safetensors: its header's
  ``__metadata__``), and refuse the wrong format, a damaged or foreign file
  with what it is and what to do.
"""

import errno
import hashlib
import io
import json
import os
import re
import secrets
import stat

try:
    import fcntl
except ImportError:  # not on Windows: no stale temporary files are removed there
    fcntl = None

import torch
from skorch.history import History

#: key of the metadata in a torch state_dict's root module metadata and in safetensors' header
METADATA_KEY = "sparse_token_estimators"
#: bytes per ``os.write`` call
_CHUNK = 1 << 20


# -- atomic writes ----------------------------------------------------------------


def _save_error(exc, path, what):
    """An ``OSError`` (subclass chosen by errno) naming ``path``, the cause and the fix."""
    directory = os.path.dirname(os.path.abspath(path))
    causes = {
        errno.ENOSPC: ("the file system is full (no space left on the device)",
                       "Free some space or save elsewhere"),
        errno.EDQUOT: ("the disk quota is exceeded", "Free some space or save elsewhere"),
        errno.EROFS: ("the file system is read-only", "Save into a writable directory"),
        errno.EACCES: (f"the directory '{directory}' is not writable (permission denied)",
                       "Save into a writable directory"),
        errno.EISDIR: ("it is a directory",
                       f"Pass a file path, e.g. '{os.path.join(path, 'params.pt')}'"),
        errno.ENOENT: (f"the directory '{directory}' does not exist",
                       "Create it first (os.makedirs) or save elsewhere"),
        errno.ENOTDIR: ("a part of the path is a file, not a directory",
                        "Pass a path inside a directory"),
    }
    causes[errno.EPERM] = causes[errno.EACCES]
    cause, fix = causes.get(exc.errno, (exc.strerror or str(exc), "Save elsewhere"))
    return OSError(exc.errno, f"Could not save {what} to '{os.fspath(path)}': {cause}. {fix}; "
                              "nothing was written, the file there (if any) is unchanged.")


def _write_fd(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view[:_CHUNK]):]


def _fsync_dir(directory):
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stage(path, data, what):
    """Write ``data`` to a new temporary file beside ``path``, fsynced; return its path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise _save_error(OSError(errno.EISDIR, "Is a directory"), path, what)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _save_error(exc, path, what) from None
    _lock(fd)  # held until the file is moved: a live write is never taken for a stale one
    try:
        _write_fd(fd, data)
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        _remove_quietly(tmp)
        raise _save_error(exc, path, what) from None
    return tmp, fd


def is_temporary(name):
    """Whether ``name`` is that of a temporary file of ``_stage`` (a killed write's, if stale).

    Examples
    --------
    >>> is_temporary(".results.json.0f3a9c1b.tmp"), is_temporary("results.json")
    (True, False)
    """
    return TEMPORARY_NAME.fullmatch(name) is not None


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def write_files(items):
    """Write ``[(path, data, what), ...]`` atomically, all or none.

    Every file is first written in full to a temporary file beside its
    target and fsynced; only when all are written are they ``os.replace``-d
    over their targets (and the directories fsynced). A failure while
    writing removes the temporary files and raises the ``OSError`` of
    ``_save_error``: no target has changed.
    """
    for directory in {os.path.dirname(os.fspath(path)) for path, _, _ in items}:
        remove_stale_temporaries(directory)
    staged = []
    try:
        for path, data, what in items:
            staged.append((*_stage(path, data, what), os.fspath(path)))
    except BaseException:
        for tmp, fd, _ in staged:
            os.close(fd)
            _remove_quietly(tmp)
        raise
    try:
        for tmp, _, path in staged:
            os.replace(tmp, path)
    finally:
        for _, fd, _ in staged:
            os.close(fd)
    for directory in {os.path.dirname(path) for _, _, path in staged}:
        _fsync_dir(directory)


# -- what killed writes leave behind ---------------------------------------------------

#: the name ``_stage`` gives a temporary file: ``.<target name>.<8 hex digits>.tmp``
TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


def _lock(fd, blocking=True):
    """Take an exclusive ``flock`` on ``fd``; False if another holds it (non-blocking)."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks: leave the file alone
        return False
    return True


def remove_stale_temporaries(directory):
    """Remove the temporary files that killed writes left in ``directory``; return their names.

    Only names of the package's own pattern (:data:`TEMPORARY_NAME`, as
    ``write_files`` and the checkpoints' staged files make them, e.g.
    ``.criterion.pt.staged.1a2b3c4d.tmp``) are considered, and only those no
    live write holds: a writer keeps an exclusive ``flock`` on its temporary
    file until the file is moved over its target, and the lock dies with its
    process, so a file whose lock can be taken was left by a write that was
    killed. Errors (a directory that is gone, a file removed meanwhile) are
    ignored: this is housekeeping, never a reason for a save or a load to fail.
    Only regular files are opened (non-blocking): another kind of file by such a
    name (a FIFO) is left alone, never waited on.
    Called by every save (``write_files``) and every load (``load_params``,
    a checkpoint's files) in that directory.
    """
    removed = []
    if fcntl is None:
        return removed
    try:
        names = [name for name in os.listdir(directory or ".")
                 if TEMPORARY_NAME.fullmatch(name)]
    except OSError:
        return removed
    # only regular files: a FIFO by such a name (or a device) is never opened, since
    # opening one blocks until a writer comes; checked before opening (lstat: a link
    # is not followed), and again on what was opened, non-blocking, in case the name
    # was swapped in between
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0))
    for name in names:
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) and _lock(fd, blocking=False):
                os.unlink(path)
                removed.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _kind(mode):
    """What a file of ``mode`` is, in words (for one that is not a regular file)."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def read_regular(path, what):
    """The bytes of the package's own file ``path``, opened without blocking.

    A file the package wrote is a regular file; anything else by that name
    (a FIFO, whose opening would wait for a writer, a device) is refused with
    a ``ValueError`` naming ``what`` it should be and what to do, never read.
    ``FileNotFoundError`` (and other ``OSError``) as ``os.open`` raises them.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{what} '{os.fspath(path)}' is {_kind(mode)}, not a regular "
                             "file, which this package never writes: it is not read. Nothing "
                             "was loaded. Delete or move it.")
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def digest(data):
    """sha256 of ``data``, as hex."""
    return hashlib.sha256(data).hexdigest()


# -- reading and writing states -----------------------------------------------------


def is_path(f):
    return isinstance(f, (str, os.PathLike))


def read_bytes(f, what):
    """The bytes of ``f`` (a path or a file object), with a clear error if it cannot be read."""
    if not is_path(f):
        return f.read()
    if os.path.isdir(f):
        raise IsADirectoryError(errno.EISDIR, f"{what} '{os.fspath(f)}' is a directory, not a "
                                "file: pass the path of the file saved by save_params.")
    with open(f, "rb") as file:
        return file.read()


def _safetensors_header(data):
    """The JSON header of a safetensors file, or None if ``data`` is not one."""
    if len(data) < 10:
        return None
    size = int.from_bytes(data[:8], "little")
    if size > len(data) - 8 or data[8:9] != b"{":
        return None
    try:
        return json.loads(data[8:8 + size])
    except ValueError:
        return None


def _what_it_is(data):
    """What ``data`` looks like, for error messages."""
    if not data:
        return "an empty file (0 bytes)"
    if data[:4] == b"PK\x03\x04":
        return "a torch file (a zip archive)"
    if _safetensors_header(data) is not None:
        return "a safetensors file"
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "a pickle"
    if data.lstrip()[:1] in (b"[", b"{"):
        return "a JSON file (a history? pass it as f_history)"
    return f"neither a torch nor a safetensors file (it starts with {data[:8]!r})"


def _own_storage(state_dict):
    """``state_dict`` with each tensor that views a larger storage (a fit training side by
    side: its weights are a row of the group's stacked ones) replaced by its copy, in
    place (the dict keeps torch's metadata): torch.save would write the whole storage."""
    for key, value in state_dict.items():
        if isinstance(value, torch.Tensor) and \
                value.untyped_storage().nbytes() > value.numel() * value.element_size():
            state_dict[key] = value.clone()
    return state_dict


def state_bytes(component, use_safetensors, metadata=None):
    """Serialise ``component.state_dict()`` (with ``metadata``, a JSON-able dict, if given:
    then ``component`` is a ``torch.nn.Module``)."""
    text = None if metadata is None else json.dumps(metadata, sort_keys=True)
    if use_safetensors:
        from safetensors.torch import save

        try:
            return save(_own_storage(component.state_dict()), metadata=None if text is None else
                        {"format": "pt", METADATA_KEY: text})
        except ValueError as exc:
            raise ValueError(
                "Safetensors can only store tensors, not generic Python objects (as e.g. "
                "optimizer states). Save those without use_safetensors=True."
            ) from exc
    if text is None:
        state_dict = component.state_dict()
    else:
        # torch's state_dict post-hook is handed the module's own metadata (its
        # version, saved in the file with the tensors): ours goes beside it
        def add_ours(module, state_dict, prefix, local_metadata):
            if module is component and prefix == "":
                local_metadata[METADATA_KEY] = text

        handle = component.register_state_dict_post_hook(add_ours)
        try:
            state_dict = component.state_dict()
        finally:
            handle.remove()
    buffer = io.BytesIO()
    torch.save(_own_storage(state_dict), buffer)
    return buffer.getvalue()


def _torch_metadata(state):
    """Our metadata's text in a torch state_dict (the root module's own metadata), or None.

    torch hands each module's metadata to ``load_state_dict``'s pre-hooks: an empty
    module reads the root's (and loads nothing).
    """
    found = {}

    def read(module, state_dict, prefix, local_metadata, *args):
        found.update(local_metadata)

    reader = torch.nn.Module()
    reader.register_load_state_dict_pre_hook(read)
    reader.load_state_dict(state, strict=False)
    return found.get(METADATA_KEY)


def read_state(data, what, use_safetensors, torch_load_kwargs=None):
    """Decode a state saved by ``state_bytes``: ``(state_dict, metadata or None)``.

    A file of the other format, random bytes or a truncated file raise a
    ``ValueError`` naming the file, what it holds and what to do.
    """
    found = _what_it_is(data)
    if use_safetensors:
        header = _safetensors_header(data)
        if header is None:
            hint = ("pass use_safetensors=False" if found.startswith("a torch")
                    else "pass the file written by save_params(..., use_safetensors=True)")
            raise ValueError(f"{what} is not a safetensors file: it is {found}. Nothing was "
                             f"loaded. To load it, {hint}.")
        from safetensors.torch import load

        state = load(bytes(data))
        text = (header.get("__metadata__") or {}).get(METADATA_KEY)
    else:
        kwargs = dict(torch_load_kwargs or {"weights_only": True})
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", **kwargs)
        except Exception as exc:  # torch raises many kinds, none naming the file
            if found == "a safetensors file":
                found, hint = f"it is {found}", "To load it, pass use_safetensors=True"
            elif found.startswith("a torch"):
                cause = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                found = f"it is {found} that torch cannot read ({cause})"
                hint = "It is damaged or truncated, or needs torch_load_kwargs: save it again"
            else:
                found, hint = f"it is {found}", "Pass the file written by save_params"
            raise ValueError(f"{what} could not be read as a torch file: {found}. Nothing was "
                             f"loaded. {hint}.") from None
    if not isinstance(state, dict):
        raise ValueError(f"{what} holds a {type(state).__name__}, not a state_dict. Nothing "
                         "was loaded. Pass a file written by save_params.")
    if not use_safetensors:
        text = _torch_metadata(state)
    return state, None if text is None else json.loads(text)


def history_bytes(history):
    return json.dumps(history.to_list()).encode()


def read_history(data, what):
    try:
        rows = json.loads(data)
    except ValueError:
        rows = None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{what} is not a history file: it is {_what_it_is(data)}. Nothing "
                         "was loaded. Pass the f_history file written by save_params.")
    return History(rows)
