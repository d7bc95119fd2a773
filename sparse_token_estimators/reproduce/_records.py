"""What makes a run resumable and its directory one run's, trusting nothing it reads back.

- :class:`RecordStore`: one JSON file per finished ``(Fit, seed)`` in
  ``<out>/records/``; a file it cannot trust is refused (:class:`StoreError`,
  naming the file and the fix), never used.
- :class:`RunLock`: one run at a time per directory (``fcntl.flock``).
- :func:`write_atomic`: every file of a run goes through the package's one
  atomic writer (``_files.write_files``).
- The manifest (``manifest.json``): which files a run wrote; every name it
  lists is checked to be a file of the directory before anything is removed.
"""

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import stat
from dataclasses import asdict
from pathlib import Path

import numpy as np

#: the folder of the records inside a run's directory, and its configuration file
RECORDS, CONFIG_FILE, MANIFEST = "records", "config.json", "manifest.json"
#: the lock file of a run's directory (``RunLock``)
LOCK_FILE = ".lock"

#: configuration fields that change how a run is executed or how much of it runs, never a
#: record's numbers: a record is one (fit, seed), the same whichever experiments ask for
#: it and however many seeds the run has, so a run with more seeds or other experiments
#: reuses the records it shares with an earlier one in the same folder (the same for the
#: seeds of the architectures experiment, ``architecture_n_seeds``)
EXECUTION_FIELDS = ("n_jobs", "n_seeds", "experiments", "architecture_n_seeds",
                    "judge_architectures", "rival_more_steps")

#: why a number is missing, by the key it would have had (``strict_json``)
MISSING_REASONS = {
    "fit_cpu_s": "a learning curve's fit records no CPU time; "
                 "fit_s is its wall time in the worker",
}

#: the version of a record file's layout (``RecordStore``); 3: the digest covers the
#: fit, the seed and the configuration with the numbers (2's covered the numbers alone)
RECORD_FORMAT = 3


class StoreError(ValueError):
    """A file of a run's directory cannot be trusted or read; the message names it and the fix."""


class OutLocked(StoreError):
    """Another run holds the directory (``RunLock``)."""


class OutNotWritable(OSError):
    """A file of the run could not be written into its directory (read-only, full, ...)."""


def write_atomic(path, text, what=None):
    """Write ``text`` (str, as UTF-8, or bytes) to ``path`` with ``_files.write_files``;
    ``OutNotWritable`` (naming the file and the cause) if it fails. Returns ``path``."""
    from .._files import write_files  # imports torch: not before the command line's checks

    path = Path(path)
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    try:
        write_files([(path, data, what or path.name)])
    except OSError as exc:
        message = exc.strerror or str(exc)  # _files names the file, the cause and the fix
        if exc.filename is not None:
            message = f"Could not write '{path}': {message}"
        raise OutNotWritable(exc.errno, message) from None
    return path


def _remove_stale_temporaries(out):
    """Remove the temporary files of killed writes in ``out`` and its records (a link by
    that name itself, never what it leads to); only under the ``RunLock``."""
    from .._files import is_temporary

    for folder in (out, out / RECORDS):
        if folder.is_symlink() or not folder.is_dir():
            continue
        for entry in os.scandir(folder):
            if is_temporary(entry.name) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


class RunLock:
    """One run at a time in ``out_dir``: an exclusive ``fcntl.flock`` on ``out_dir/.lock``.

    The lock file names the holder (PID and ``command``); the kernel drops
    the lock with its process, so a stale lock file never blocks a later run.
    Taking it removes the temporary files of killed writes. Without ``fcntl``
    (Windows) no lock is taken. ``OutLocked`` names the holder; a lock file
    that is a symbolic link or cannot be opened is a ``StoreError``.
    """

    def __init__(self, out_dir, command=None):
        self.out = Path(out_dir)
        self.path = self.out / LOCK_FILE
        self.command = command
        self._fd = None

    def _still_named(self, fd):
        """Whether ``self.path`` still names the file open as ``fd``."""
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def acquire(self, attempt=0):
        try:
            import fcntl
        except ImportError:  # no flock on this platform: one run at a time is up to the user
            return self
        # held open for reading only: a file open for writing would keep the file
        # system from being remounted read-only (a run's folder may be, part way)
        # non-blocking: opening a FIFO put there would otherwise wait for a writer
        flags = (os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NONBLOCK", 0))
        try:
            fd = os.open(self.path, os.O_RDONLY | flags, 0o666)
        except OSError as exc:
            why = ("it is a symbolic link (nothing outside the folder is written); delete it"
                   if exc.errno == errno.ELOOP else f"{exc.strerror or exc}")
            raise StoreError(f"cannot open the lock file {self.path}: {why}") from None
        kind = _not_regular(os.fstat(fd))
        if kind:
            os.close(fd)
            raise StoreError(f"cannot use the lock file {self.path}: it is {kind}, not a "
                             "regular file, which a run never makes; delete it") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "a process"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OutLocked(f"{self.out} is in use by another run ({holder}): one run at a "
                                "time per folder; wait for it to end or choose another --out"
                                ) from None
            raise StoreError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        if not self._still_named(fd):
            # its holder removed the file (a refused run that made the folder) between our
            # open and our flock: a lock on it would lock nothing; take the new one's
            os.close(fd)
            if attempt >= 8:
                raise StoreError(f"cannot lock {self.path}: the file is removed and made again "
                                 "by another process, over and over") from None
            return self.acquire(attempt + 1)
        self._fd = fd
        about = f"PID {os.getpid()}" + (f": {self.command}" if self.command else "")
        try:  # another descriptor: closing it leaves the flock of ``fd`` in place
            writer = os.open(self.path, os.O_WRONLY | os.O_TRUNC | flags, 0o666)
            try:
                os.write(writer, (about + "\n").encode())
            finally:
                os.close(writer)
        except OSError as exc:
            self.release()
            raise StoreError(f"cannot write the lock file {self.path}: "
                             f"{exc.strerror or exc}") from None
        _remove_stale_temporaries(self.out)
        return self

    def release(self, remove=False):
        """Let another run have the folder (closing the file releases the lock).

        With ``remove=True`` the lock file is deleted first, while the lock is
        still held, and only if it is this lock's file (a run that made the folder
        and is refused leaves nothing). A lock not held (never taken, refused,
        released) removes nothing: another run's lock file is never deleted.
        """
        if self._fd is not None:
            if remove and self._still_named(self._fd):
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self):
        """Whether this process holds the lock."""
        return self._fd is not None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def strict_json(value):
    """``value`` with every NaN or infinity replaced by None (strict JSON); in a dict,
    the missing number ``k`` gets ``k_missing``: why (``MISSING_REASONS``, or what it was).

    Examples
    --------
    >>> strict_json({"slope": float("nan"), "r2": [0.5, float("inf")]})
    {'slope': None, 'slope_missing': 'NaN: not defined for this row', 'r2': [0.5, None]}
    """
    if isinstance(value, np.generic):  # a numpy scalar: its Python value
        value = value.item()
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out[k] = strict_json(v)
            if out[k] is None and v is not None and f"{k}_missing" not in value:
                out[f"{k}_missing"] = MISSING_REASONS.get(k, _what(v))
        return out
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _what(value):
    if math.isnan(value):
        return "NaN: not defined for this row"
    return f"{'+' if value > 0 else '-'}Infinity: not reached"


def dumps(value):
    """Strict JSON text of ``value`` (``strict_json``, numpy scalars as numbers)."""
    return json.dumps(strict_json(value), indent=1, default=_number, allow_nan=False)


def _number(value):
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# A record's floats must come back exactly, NaN included: {"float": "nan"}
def _encode(value):
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):  # r2_by_length: {length: r2}
            return {"items": [[k, _encode(v)] for k, v in value.items()]}
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _decode(value):
    if isinstance(value, dict):
        if set(value) == {"float"}:
            return float(value["float"])
        if set(value) == {"items"}:
            return {k: _decode(v) for k, v in value["items"]}
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def config_identity(config):
    """The configuration fields that set a run's numbers, as JSON values."""
    fields = asdict(config)
    for name in EXECUTION_FIELDS:
        fields.pop(name, None)
    if fields.get("trainer") == "exact":  # bit for bit the lone fits: the records as before
        del fields["trainer"]
    return json.loads(json.dumps(fields))


def _digest(value):
    """sha256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


#: the fix for a record, a manifest or a configuration file that cannot be trusted
_FIX = "delete that file (what it held is made again) or pass --fresh to start from zero"


def _not_regular(status):
    """What a file is when it is not a regular file (``os.stat_result``), else None."""
    mode = status.st_mode
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def _read_regular(path):
    """The bytes of ``path``, opened without blocking and read only if it is a regular
    file; else ``(None, what it is)``. ``OSError`` as ``os.open`` raises it."""
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(path, flags)
    try:
        kind = _not_regular(os.fstat(fd))
        if kind:
            return None, kind
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks), None
    finally:
        os.close(fd)


def _read_json(path, what, fix=_FIX):
    """The JSON value in ``path``; a ``StoreError`` naming it, what is wrong and ``fix``.

    Only a regular file is read (opened without blocking: a FIFO there never
    holds the run up)."""
    path = Path(path)
    if path.is_symlink():
        raise StoreError(f"{path} ({what}) is a symbolic link, which a run never writes: it "
                         f"is not read. To go on, {fix}.")
    try:
        data, kind = _read_regular(path)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise StoreError(f"{path} ({what}) cannot be read: {exc.strerror or exc}. To go on, "
                         f"{fix}.") from None
    if kind:
        raise StoreError(f"{path} ({what}) is {kind}, not a regular file, which a run never "
                         f"writes: it is not read. To go on, {fix}.")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        problem = f"it is not UTF-8 text (byte {exc.start} is {data[exc.start:exc.start + 1]!r})"
    except ValueError as exc:
        cause = re.sub(r"\s+at$", "", getattr(exc, "msg", str(exc)))
        problem = ("it is empty" if not data.strip() else
                   f"it is not JSON, or is cut short ({cause} at byte "
                   f"{getattr(exc, 'pos', '?')} of {len(data)})")
    raise StoreError(f"{path} ({what}) is damaged: {problem}. To go on, {fix}.")


class RecordStore:
    """The finished fits of the run in ``out_dir``, one JSON file each under ``records/``.

    A record file holds the fit, the seed, a digest of the configuration, the
    record and a digest of all four; its name is a digest of the first
    three. A file that is not what its name says (copied over another's, or
    another record's numbers and digest pasted in), edited, cut short or not
    a record is refused (``StoreError``), never used; opening the store checks
    every file there, and refuses records made with another ``config`` than
    this one (other than in ``EXECUTION_FIELDS``), naming each field that
    differs.
    """

    def __init__(self, out_dir, config):
        self.out = Path(out_dir)
        self.path = self.out / RECORDS
        self.identity = config_identity(config)
        self.resumed = 0  # records read back by get()
        if self.path.is_symlink() or (self.path.exists() and not self.path.is_dir()):
            raise StoreError(f"{self.path} is not a folder of this run (a symbolic link or a "
                             "file): no record is read or written there. Move it away, or "
                             "choose another --out.")
        saved = self.path / CONFIG_FILE
        if saved.exists() or saved.is_symlink():
            fix = ("delete that file (it is written again from this run's configuration; "
                   "each record names its own) or pass --fresh to start from zero")
            identity = _read_json(saved, "the configuration of the records", fix)
            if not isinstance(identity, dict):
                raise StoreError(f"{saved} (the configuration of the records) is damaged: it "
                                 f"holds a JSON {type(identity).__name__}, not the fields of a "
                                 f"configuration. To go on, {fix}.")
            differences = describe_differences(identity, self.identity)
            if differences:
                raise StoreError(
                    f"{self.out} holds the records of a run with another configuration "
                    f"({'; '.join(differences)}). Choose another --out, or pass --fresh to "
                    "discard those records and that run's files.")
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomic(saved, json.dumps(self.identity, indent=1, allow_nan=False),
                         "the configuration of the records")
        for path in sorted(self.path.glob("*.json")):  # refuse a bad one now, not mid-run
            if path.name != CONFIG_FILE:
                self._read(path)

    def _name(self, fit, seed, identity_digest):
        """The file name of the record of ``fit`` (a Fit, or its dict) for ``seed``."""
        fields = fit if isinstance(fit, dict) else asdict(fit)
        key = _digest([fields, seed, identity_digest])[:20]
        label = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", str(v))
                         for k, v in fields.items()
                         if v is not None and (k, v) != ("lr", 0.0))[:80]
        return f"{label}-s{seed}-{key}.json"

    def _file(self, config, fit, seed):
        return self.path / self._name(fit, seed, _digest(config_identity(config)))

    def _read(self, path, config=None):
        """The decoded record in ``path``, after checking it is what its name says."""
        content = _read_json(path, "a record of a finished fit")
        keys = ("format", "fit", "seed", "config", "record", "digest")
        if not isinstance(content, dict) or any(k not in content for k in keys):
            found = (f"a JSON {type(content).__name__}" if not isinstance(content, dict) else
                     "no " + ", no ".join(repr(k) for k in keys if k not in content))
            raise StoreError(f"{path} is not a record of a finished fit (it holds {found}). "
                             f"To go on, {_FIX}.")

        def refuse(problem):
            raise StoreError(f"{path} cannot be trusted: {problem}. It is not used; to go on, "
                             f"{_FIX}.")

        if content["format"] != RECORD_FORMAT:
            earlier = (" (written by an earlier version, whose digest did not say which fit "
                       "the numbers are of)" if content["format"] in (1, 2) else "")
            refuse(f"it is a record of format {content['format']!r}{earlier}, this version "
                   f"reads format {RECORD_FORMAT}")
        asked = _digest(config_identity(config) if config is not None else self.identity)
        if content["config"] != asked:
            refuse("it was made with another configuration than this run's")
        if not isinstance(content["fit"], dict):
            refuse(f"its fit is a JSON {type(content['fit']).__name__}, not a fit")
        try:
            own_name = self._name(content["fit"], content["seed"], content["config"])
        except (TypeError, ValueError):
            refuse("its fit or seed is not one a run writes")
        if own_name != path.name:
            refuse(f"it holds the record of {_about(content['fit'], content['seed'])}, "
                   "not that of the fit and seed its name says (a record copied or renamed "
                   "over another's?)")
        try:
            payload_digest = _record_digest(content)
        except ValueError:
            payload_digest = None
        if payload_digest != content["digest"]:
            refuse("its numbers are not those written for the fit and seed it names (their "
                   "digest differs: edited by hand, damaged, or another record's numbers "
                   "pasted in)")
        return _decode(content["record"])

    def get(self, config, fit, seed):
        """The record of ``fit`` for ``seed`` under ``config``, or None (``StoreError`` if
        the file there is not that record)."""
        path = self._file(config, fit, seed)
        try:
            record = self._read(path, config)
        except FileNotFoundError:
            return None
        self.resumed += 1
        return record

    def put(self, config, fit, seed, record):
        """Save the record of ``fit`` for ``seed`` (atomically; ``OutNotWritable`` if it fails)."""
        content = {"format": RECORD_FORMAT, "fit": asdict(fit), "seed": seed,
                   "config": _digest(config_identity(config)), "record": _encode(record)}
        content["digest"] = _record_digest(content)
        write_atomic(self._file(config, fit, seed), json.dumps(content, allow_nan=False),
                     f"the record of {_about(asdict(fit), seed)}")

    def __len__(self):
        return sum(1 for p in self.path.glob("*.json") if p.name != CONFIG_FILE)


def _record_digest(content):
    """The digest of a record file: its numbers with the fit, seed and configuration they
    are of, so that numbers moved to another fit's file do not match."""
    return _digest([content["fit"], content["seed"], content["config"], content["record"]])


def _about(fields, seed):
    """``the fit (model='fcn', width=8, ...), seed 0`` for messages."""
    # a rate left to the model's training (lr=0) is not shown
    shown = ", ".join(f"{k}={v!r}" for k, v in fields.items() if (k, v) != ("lr", 0.0))
    return f"the fit ({shown}), seed {seed!r}"


def describe_differences(saved, asked):
    """``["field: saved X, asked Y", ...]`` for the fields that differ."""
    return [f"{k}: saved {saved.get(k, '(absent)')!r}, asked {asked.get(k, '(absent)')!r}"
            for k in sorted(set(saved) | set(asked)) if saved.get(k) != asked.get(k)]


#: the fix for a manifest that cannot be trusted: it alone says which files are the run's
_MANIFEST_FIX = ("delete that manifest (the files beside it then count as no run's: move "
                 "them away too) or choose another --out")


def _inside(out, name, source):
    """``out / name`` if ``name`` (listed in ``source``) is a plain file name directly in
    ``out``, not leading out of it through a symbolic link; else a ``StoreError``."""
    bad = None
    if not isinstance(name, str) or not name:
        bad = "it is not a file name"
    elif name in (".", "..") or "/" in name or os.sep in name or "\0" in name or \
            os.path.isabs(name) or (os.altsep and os.altsep in name):
        bad = "it is not a plain file name inside the folder"
    elif name in (RECORDS, LOCK_FILE, MANIFEST):
        bad = "it is the run's own bookkeeping, not an output"
    elif (out / name).resolve().parent != out.resolve():
        bad = "it is a symbolic link leading out of the folder"
    if bad:
        raise StoreError(f"{source} lists {name!r}, which a run never writes ({bad}). "
                         f"Nothing was removed; to go on, {_MANIFEST_FIX}.")
    return out / name


def read_manifest(out_dir):
    """The file names the last run in ``out_dir`` wrote (or was writing), or [], each
    checked by ``_inside`` (a damaged manifest is a ``StoreError`` naming it)."""
    out = Path(out_dir)
    path = out / MANIFEST
    try:
        manifest = _read_json(path, "the list of the files of the earlier run",
                              fix=_MANIFEST_FIX)
    except FileNotFoundError:
        return []
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise StoreError(f"{path} (the list of the files of the earlier run) is damaged: it "
                         "holds no list of 'files'. Nothing was removed; to go on, "
                         f"{_MANIFEST_FIX}.")
    return [_inside(out, name, path).name for name in manifest["files"]]


def foreign_files(out_dir):
    """Names in ``out_dir`` that no run wrote: neither in its manifest nor a run's own."""
    from .._files import is_temporary

    out = Path(out_dir)
    if not out.is_dir():
        return []
    ours = set(read_manifest(out)) | {MANIFEST, RECORDS, LOCK_FILE}
    return sorted(p.name for p in out.iterdir() if p.name not in ours and not is_temporary(p.name))


def _remove(path):
    """Remove the file ``path`` (checked inside the folder); a directory or none is left."""
    with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
        path.unlink()


def _write_manifest(out, **content):
    write_atomic(out / MANIFEST, json.dumps(content, indent=1, allow_nan=False),
                 "the list of the files of the run")


def begin_outputs(out_dir, names):
    """Before writing ``names``: list them in the manifest (as not yet complete),
    and remove the files of the earlier run that this one does not write."""
    out = Path(out_dir)
    earlier = read_manifest(out)  # every name checked before anything is removed
    for name in names:
        _inside(out, name, "the outputs of this run")
    _write_manifest(out, complete=False, files=sorted(set(earlier) | set(names)))
    for name in sorted(set(earlier) - set(names)):
        _remove(out / name)


def finish_outputs(out_dir, names, **about):
    """Write the manifest last: the files the run wrote, and ``about`` the run."""
    out = Path(out_dir)
    files = sorted(names)
    _write_manifest(out, complete=True, **about, files=files,
                    bytes={name: (out / name).stat().st_size for name in files})


def discard_run(out_dir):
    """``--fresh``: remove the records and the files the manifest lists (nothing else;
    every name is checked first, and a ``records`` that is a symbolic link refused)."""
    out = Path(out_dir)
    names = read_manifest(out)
    records = out / RECORDS
    if records.is_symlink():
        raise StoreError(f"{records} is a symbolic link, not the folder of this run's records: "
                         "--fresh removes nothing through it. Remove the link, or choose "
                         "another --out.")
    for name in names:
        _remove(out / name)
    _remove(out / MANIFEST)
    if records.is_dir():
        shutil.rmtree(records)
