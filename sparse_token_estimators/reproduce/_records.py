"""What makes a run resumable and its directory one run's: records, atomic files, a manifest.

- :class:`RecordStore`: each finished fit's record, one JSON file per
  ``(Fit, seed)`` in ``<out>/records/``, written as its fit (or the search
  that made it) finishes; a rerun reads them back instead of fitting again.
  The directory remembers the configuration its records were made with
  (``records/config.json``) and refuses another one, naming what differs.
- :func:`write_atomic`: every file of a run is written to a temporary file
  in its directory, flushed, synced and renamed over its name, so a file is
  either the old one or the whole new one, never half of one.
- :func:`strict_json`: NaN and infinity as ``null``, with the reason beside
  (``"<key>_missing"``), since strict JSON parsers refuse them.
- The manifest (``manifest.json``): which files a run wrote; files of an
  earlier run that the new one does not write are removed, and a directory
  holding files no run wrote is refused (:func:`foreign_files`).
"""

import hashlib
import json
import math
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

#: the folder of the records inside a run's directory, and its configuration file
RECORDS, CONFIG_FILE, MANIFEST = "records", "config.json", "manifest.json"

#: configuration fields that change how a run is executed, not its numbers
EXECUTION_FIELDS = ("n_jobs",)

#: why a number is missing, by the key it would have had (``strict_json``)
MISSING_REASONS = {
    "fit_cpu_s": "a learning curve's fit records no CPU time; "
                 "fit_s is its wall time in the worker",
}

_TMP_PREFIX = ".tmp-"


def write_atomic(path, text):
    """Write ``text`` (str or bytes) to ``path``: it holds the old content or the new, never part.

    A temporary file in the same directory is written, flushed and synced,
    then renamed over ``path`` (``os.replace``, atomic on POSIX and Windows).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes)
              else os.fdopen(fd, "w", newline="")) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress_os_error():
            os.unlink(tmp)
        raise
    return path


class _suppress_os_error:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, OSError)


def strict_json(value, key=None):
    """``value`` with every NaN or infinity replaced by None, the reason beside it.

    In a dict, a missing number ``k`` gets ``k_missing``: the reason from
    ``MISSING_REASONS`` or what the value was ("NaN: ..."); in a list, the
    entry is None (the list's own description says what it holds).

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
            out[k] = strict_json(v, k)
            if _non_finite(v) and f"{k}_missing" not in value:
                out[f"{k}_missing"] = MISSING_REASONS.get(k, _what(v))
        return out
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if _non_finite(value):
        return None
    return value


def _non_finite(value):
    if isinstance(value, np.generic):
        value = value.item()
    return isinstance(value, float) and not math.isfinite(value)


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


# A record's floats must come back exactly (``repr`` round trip), NaN included:
# non-finite floats are written as {"float": "nan"} and read back as floats.
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
    return json.loads(json.dumps(fields))


class ConfigMismatch(ValueError):
    """The records in a directory were made with another configuration."""


class RecordStore:
    """The finished fits of a run, one JSON file each under ``<out_dir>/records``.

    Parameters
    ----------
    out_dir : str or Path
        The run's output directory.
    config : ReproductionConfig
        The run's configuration; a directory whose records were made with
        another one (other than in ``EXECUTION_FIELDS``) is refused.

    Raises
    ------
    ConfigMismatch
        Naming each field that differs (saved and asked), and the fix.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators.reproduce import SMOKE
    >>> from sparse_token_estimators.reproduce._fits import Fit
    >>> with tempfile.TemporaryDirectory() as out:
    ...     store = RecordStore(out, SMOKE)
    ...     store.put(SMOKE, Fit("fcn", 8, 4), 0, {"test_r2": float("nan")})
    ...     RecordStore(out, SMOKE).get(SMOKE, Fit("fcn", 8, 4), 0)
    {'test_r2': nan}
    """

    def __init__(self, out_dir, config):
        self.path = Path(out_dir) / RECORDS
        self.identity = config_identity(config)
        self.resumed = 0  # records read back by get()
        saved = self.path / CONFIG_FILE
        if saved.exists():
            differences = describe_differences(json.loads(saved.read_text()), self.identity)
            if differences:
                raise ConfigMismatch(
                    f"{Path(out_dir)} holds the records of a run with another configuration "
                    f"({'; '.join(differences)}). Choose another --out, or pass --fresh to "
                    "discard those records and that run's files.")
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomic(saved, json.dumps(self.identity, indent=1, allow_nan=False))
        for stale in self.path.glob(_TMP_PREFIX + "*"):  # a killed run's half-written record
            with _suppress_os_error():
                stale.unlink()

    def _file(self, config, fit, seed):
        key = json.dumps([asdict(fit), seed, config_identity(config)], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return self.path / (f"{fit.model}-{fit.width}-T{fit.seq_len}-{fit.data}-s{seed}-"
                            f"{digest}.json")

    def get(self, config, fit, seed):
        """The record of ``fit`` for ``seed`` under ``config``, or None if not made."""
        path = self._file(config, fit, seed)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        self.resumed += 1
        return _decode(json.loads(text))["record"]

    def put(self, config, fit, seed, record):
        """Save the record of ``fit`` for ``seed`` (atomically)."""
        write_atomic(self._file(config, fit, seed), json.dumps(
            {"fit": asdict(fit), "seed": seed, "record": _encode(record)}, allow_nan=False))

    def __len__(self):
        return sum(1 for p in self.path.glob("*.json") if p.name != CONFIG_FILE)


def describe_differences(saved, asked):
    """``["field: saved X, asked Y", ...]`` for the fields that differ."""
    return [f"{k}: saved {saved.get(k, '(absent)')!r}, asked {asked.get(k, '(absent)')!r}"
            for k in sorted(set(saved) | set(asked)) if saved.get(k) != asked.get(k)]


def read_manifest(out_dir):
    """The file names the last run in ``out_dir`` wrote (or was writing), or []."""
    try:
        return json.loads((Path(out_dir) / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return []


def foreign_files(out_dir):
    """Names in ``out_dir`` that no run wrote: neither in its manifest nor a run's own."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    ours = set(read_manifest(out)) | {MANIFEST, RECORDS}
    return sorted(p.name for p in out.iterdir()
                  if p.name not in ours and not p.name.startswith(_TMP_PREFIX))


def begin_outputs(out_dir, names):
    """Before writing ``names``: list them in the manifest (as not yet complete),
    and remove the files of the earlier run that this one does not write."""
    out = Path(out_dir)
    earlier = read_manifest(out)
    write_atomic(out / MANIFEST, json.dumps(
        {"complete": False, "files": sorted(set(earlier) | set(names))}, indent=1))
    for name in set(earlier) - set(names):
        with _suppress_os_error():
            (out / name).unlink()
    for stale in out.glob(_TMP_PREFIX + "*"):  # a killed run's half-written files
        with _suppress_os_error():
            stale.unlink()


def finish_outputs(out_dir, names, **about):
    """Write the manifest last: the files the run wrote, and ``about`` the run."""
    out = Path(out_dir)
    files = sorted(names)
    write_atomic(out / MANIFEST, json.dumps(
        {"complete": True, **about, "files": files,
         "bytes": {name: (out / name).stat().st_size for name in files}},
        indent=1, allow_nan=False))


def discard_run(out_dir):
    """``--fresh``: remove the records and the files the manifest lists (nothing else)."""
    import shutil

    out = Path(out_dir)
    for name in read_manifest(out):
        with _suppress_os_error():
            (out / name).unlink()
    with _suppress_os_error():
        (out / MANIFEST).unlink()
    if (out / RECORDS).is_dir():
        shutil.rmtree(out / RECORDS)
