"""Checkpoints whose files always belong together: skorch's checkpoint callbacks, made safe.

:class:`Checkpoint`, :class:`TrainEndCheckpoint` and :class:`LoadInitState`
take skorch's arguments and behave as skorch's, and:

- **A checkpoint is all of one epoch, or the previous one.** The files of
  an epoch (weights, optimizer, criterion, history, pickle) are written in
  full beside their targets (``<file>.staged``), then a manifest
  (``<fn_prefix>checkpoint.json``, written atomically, last) names the epoch
  and each file's sha256, then the staged files are moved over the targets.
  ``load_params(checkpoint=cp)`` reads the manifest and takes each file
  whose digest it names, at its target or still staged: after a kill at any
  moment it loads the weights, optimizer and history of one epoch (the new
  one once its manifest is written, else the previous one).
- **Every file is written atomically** (a temporary file, fsynced, then
  ``os.replace``): no kill or full disk leaves a torn file.
- **A failed save is never silent.** It warns with
  :class:`~sparse_token_estimators.exceptions.CheckpointWarning` at every
  verbosity, naming the path and the cause (skorch's prints only when
  verbose), records ``event_cp=False`` for the epoch, and leaves the previous
  checkpoint loadable; training goes on.
- **Leftovers of killed writes are removed.** The temporary files a kill
  left in the checkpoint's directory (``.<file>.<8 hex digits>.tmp``,
  ``.params.pt.staged.<hex>.tmp``) are removed at the next save or load
  there; only files of that pattern that no live write holds.
- :class:`LoadInitState` starts fresh only when no checkpoint was written
  yet: a damaged checkpoint raises instead of being skipped.
- **A resumed run can finish its plan.** As in skorch, a fit that loads a
  checkpoint trains ``max_epochs`` epochs more (planned 12, killed at 3,
  resumed: 15 in all). ``LoadInitState(cp, max_epochs=12)`` stops the
  resumed fit once the history holds 12 epochs, so the run ends where it
  was planned to, however often it was killed and started again.

They are subclasses of skorch's (``isinstance`` checks and skorch's
arguments work). They live here rather than in ``callbacks`` because they
are one half of the package's file format; ``load_params`` is the other.
"""

import json
import os
import pickle
import warnings

from skorch import callbacks as skorch_callbacks
from skorch.utils import noop

from ._files import (
    digest,
    history_bytes,
    read_regular,
    remove_stale_temporaries,
    state_bytes,
    write_files,
)
from .exceptions import CheckpointWarning

#: format of the manifest a :class:`Checkpoint` writes
MANIFEST_FORMAT = 1


def _serialise(net, keys, use_safetensors):
    """``{f_key: bytes}`` of what the checkpoint saves, all in memory before any write."""
    keys = [key for key in keys if key != "f_pickle"]
    if hasattr(net, "state_files"):  # the package's estimators: weights with their metadata
        return net.state_files(keys, use_safetensors)
    out = {}
    for key in keys:  # any skorch net
        if key == "f_history":
            out[key] = history_bytes(net.history)
        else:
            name = "module" if key in ("f_params", "f_module") else key[2:]
            out[key] = state_bytes(getattr(net, name + "_"), use_safetensors)
    return out


class Checkpoint(skorch_callbacks.Checkpoint):
    """Save the model when the monitored score improves; the files of one epoch together.

    skorch's :class:`skorch.callbacks.Checkpoint` (same arguments, same
    files), written so that a kill, a crash or a full disk at any moment
    leaves a checkpoint of one whole epoch (see the module's docstring),
    and whose failed saves warn with
    :class:`~sparse_token_estimators.exceptions.CheckpointWarning`.

    Parameters
    ----------
    monitor, f_params, f_optimizer, f_criterion, f_history, f_pickle, fn_prefix, \
dirname, event_name, sink, load_best, use_safetensors, **kwargs
        As in skorch. ``monitor=None`` saves every epoch.
    manifest : str, default="checkpoint.json"
        Name of the manifest, in ``dirname``, after ``fn_prefix``. It names
        the epoch and the digests of its files; ``load_params(checkpoint=cp)``
        loads what it names.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> cp = Checkpoint(monitor=None, dirname=tempfile.mkdtemp())
    >>> est = SparseTokenFCN(hidden_width=8, max_epochs=3, callbacks=[cp]).fit(X, y)
    >>> new = SparseTokenFCN(hidden_width=8, seq_len=5, token_dim=2)
    >>> new = new.load_params(checkpoint=cp)  # returns the estimator
    >>> len(new.history_), cp.saved_epoch()
    (3, 3)
    """

    def __init__(self, monitor="valid_loss_best", f_params="params.pt",
                 f_optimizer="optimizer.pt", f_criterion="criterion.pt",
                 f_history="history.json", f_pickle=None, fn_prefix="", dirname="",
                 event_name="event_cp", sink=noop, load_best=False, use_safetensors=False,
                 manifest="checkpoint.json", **kwargs):
        self.manifest = manifest
        super().__init__(
            monitor=monitor, f_params=f_params, f_optimizer=f_optimizer,
            f_criterion=f_criterion, f_history=f_history, f_pickle=f_pickle,
            fn_prefix=fn_prefix, dirname=dirname, event_name=event_name, sink=sink,
            load_best=load_best, use_safetensors=use_safetensors, **kwargs)

    @property
    def manifest_path_(self):
        """Where the manifest is: ``dirname / (fn_prefix + manifest)``."""
        return os.path.join(self.dirname, self.fn_prefix + self.manifest)

    # -- saving ------------------------------------------------------------------------

    def save_model(self, net):
        """Save the checkpoint of this epoch; warn, never raise, if that fails."""
        try:
            self._save(net)
        except Exception as exc:  # the run goes on, as in skorch, but not silently
            if self.event_name is not None and len(net.history):
                net.history.record(self.event_name, False)
            try:
                previous = self.saved_epoch()
            except (OSError, ValueError):
                previous = None
            kept = (f"The checkpoint of epoch {previous} ({self.manifest_path_}) is unchanged "
                    "and still loads." if previous else "No earlier checkpoint exists.")
            warnings.warn(
                f"Checkpoint: epoch {len(net.history)} was not saved: {exc} {kept} Training "
                "goes on; warnings.simplefilter('error', CheckpointWarning) stops it instead.",
                CheckpointWarning, stacklevel=2)

    def _save(self, net):
        targets = {key: f for key, f in self.get_formatted_files(net).items() if f is not None}
        if not all(isinstance(f, str) for f in targets.values()):
            return self._save_to_files(net, targets)
        manifest = self._read_manifest()
        if manifest is not None:
            self._roll_forward(manifest)  # a kill may have left the last one half moved
        data = _serialise(net, list(targets), self.use_safetensors)
        if "f_pickle" in targets:
            data["f_pickle"] = pickle.dumps(net)
        staged = {key: targets[key] + ".staged" for key in data}
        write_files([(staged[key], data[key], f"{key} of the checkpoint") for key in data])
        where = os.path.dirname(self.manifest_path_) or "."
        manifest = {
            "format": MANIFEST_FORMAT, "epoch": len(net.history),
            "use_safetensors": bool(self.use_safetensors),
            "files": {key: {"path": os.path.relpath(targets[key], where),
                            "staged": os.path.relpath(staged[key], where),
                            "sha256": digest(data[key]), "bytes": len(data[key])}
                      for key in data},
        }
        write_files([(self.manifest_path_, json.dumps(manifest, indent=1).encode(),
                      "the checkpoint's manifest")])  # the commit: this epoch is the checkpoint
        self._roll_forward(manifest)

    def _save_to_files(self, net, targets):
        # file objects (without dirname): written in turn, as skorch does
        for key, f in targets.items():
            if key == "f_pickle":
                pickle.dump(net, f)
            else:
                net.save_params(**{key: f, "use_safetensors": self.use_safetensors})

    def _path(self, relative):
        return os.path.join(os.path.dirname(self.manifest_path_), relative)

    def _roll_forward(self, manifest):
        """Move each staged file the manifest names over its target."""
        for entry in manifest["files"].values():
            staged = self._path(entry["staged"])
            if os.path.isfile(staged) and _file_digest(staged) == entry["sha256"]:
                os.replace(staged, self._path(entry["path"]))

    # -- loading -----------------------------------------------------------------------

    def _read_manifest(self):
        try:
            text = read_regular(self.manifest_path_, "The checkpoint manifest")
        except FileNotFoundError:
            return None
        try:
            manifest = json.loads(text)
            manifest["files"], manifest["epoch"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"The checkpoint manifest '{self.manifest_path_}' is damaged (not "
                             "the JSON a Checkpoint writes). Nothing was loaded.") from None
        if manifest.get("format", 0) > MANIFEST_FORMAT:
            raise ValueError(f"The checkpoint manifest '{self.manifest_path_}' has format "
                             f"{manifest['format']}, newer than this version reads "
                             f"({MANIFEST_FORMAT}). Upgrade sparse_token_estimators.")
        return manifest

    def exists(self):
        """Whether a checkpoint was saved here (a manifest, or skorch's history file)."""
        if os.path.exists(self.manifest_path_):
            return True
        return self.f_history is not None and os.path.exists(self.f_history_)

    def saved_epoch(self):
        """The epoch (number of epochs trained) of the saved checkpoint; None if none."""
        manifest = self._read_manifest()
        return None if manifest is None else manifest["epoch"]

    def saved_files(self):
        """The files of the saved checkpoint, read and checked against their digests.

        Returns ``{"epoch", "use_safetensors", "files": {f_key: (what, bytes)}}``,
        or None where there is no manifest (nothing saved yet, or files of
        skorch's own ``Checkpoint``: ``load_params`` then reads those as skorch
        does). Raises ``ValueError`` if a file the manifest names is missing
        or changed.
        """
        remove_stale_temporaries(os.path.dirname(self.manifest_path_))  # of killed writes
        manifest = self._read_manifest()
        if manifest is None:
            return None
        files = {}
        for key, entry in manifest["files"].items():
            for name in (entry["path"], entry["staged"]):
                path = self._path(name)
                try:
                    data = read_regular(path, f"The checkpoint's {key}")
                except FileNotFoundError:
                    continue
                if digest(data) == entry["sha256"]:
                    files[key] = (f"{key} '{path}' (checkpoint of epoch {manifest['epoch']})",
                                  data)
                    break
            else:
                raise ValueError(
                    f"The checkpoint in '{self.manifest_path_}' (epoch {manifest['epoch']}) is "
                    f"incomplete: its {key} '{self._path(entry['path'])}' is missing or was "
                    "changed after the checkpoint was written (its sha256 differs). Nothing "
                    "was loaded. Load another checkpoint, or train again."
                )
        return {"epoch": manifest["epoch"], "use_safetensors": manifest["use_safetensors"],
                "files": files}


def _file_digest(path):
    return digest(read_regular(path, "A staged checkpoint file"))


class TrainEndCheckpoint(skorch_callbacks.TrainEndCheckpoint):
    """Save the model at the end of training, the files of one fit together.

    skorch's :class:`skorch.callbacks.TrainEndCheckpoint`, built on this
    module's :class:`Checkpoint` (atomic, consistent, warns when a save
    fails). ``load_params(checkpoint=end)`` loads it directly (skorch needs
    ``end.checkpoint_``, which works too).

    Parameters
    ----------
    f_params, f_optimizer, f_criterion, f_history, f_pickle, fn_prefix, dirname, \
use_safetensors, sink, **kwargs
        As in skorch (``fn_prefix="train_end_"``).
    manifest : str, default="checkpoint.json"
        As in :class:`Checkpoint`: the manifest is ``train_end_checkpoint.json``.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> end = TrainEndCheckpoint(dirname=tempfile.mkdtemp())
    >>> est = SparseTokenFCN(hidden_width=8, max_epochs=2, callbacks=[end]).fit(X, y)
    >>> new = SparseTokenFCN(hidden_width=8, seq_len=5, token_dim=2)
    >>> new = new.load_params(checkpoint=end)
    >>> len(new.history_)
    2
    """

    def __init__(self, f_params="params.pt", f_optimizer="optimizer.pt",
                 f_criterion="criterion.pt", f_history="history.json", f_pickle=None,
                 fn_prefix="train_end_", dirname="", use_safetensors=False, sink=noop,
                 manifest="checkpoint.json", **kwargs):
        self.manifest = manifest
        super().__init__(
            f_params=f_params, f_optimizer=f_optimizer, f_criterion=f_criterion,
            f_history=f_history, f_pickle=f_pickle, fn_prefix=fn_prefix, dirname=dirname,
            use_safetensors=use_safetensors, sink=sink, **kwargs)

    def _checkpoint(self):
        files = {name: value for name, value in vars(self).items() if name.startswith("f_")}
        return Checkpoint(monitor=None, fn_prefix=self.fn_prefix, dirname=self.dirname,
                          event_name=None, sink=self.sink, use_safetensors=self.use_safetensors,
                          manifest=self.manifest, **files)

    def initialize(self):
        self.checkpoint_ = self._checkpoint().initialize()
        return self

    def exists(self):
        """Whether a checkpoint was saved here."""
        return self._checkpoint().exists()

    def saved_files(self):
        """As :meth:`Checkpoint.saved_files`."""
        return self._checkpoint().saved_files()


class LoadInitState(skorch_callbacks.LoadInitState):
    """Load a checkpoint when training begins, if one was saved.

    skorch's :class:`skorch.callbacks.LoadInitState`, for this module's
    :class:`Checkpoint` and :class:`TrainEndCheckpoint`: training starts
    fresh only when no checkpoint was saved yet. A checkpoint that cannot
    be loaded (damaged, or of another model) raises, where skorch's would
    skip a missing file and train from scratch without a word.

    **Finishing a planned run.** As in skorch, a fit that loads a
    checkpoint then trains ``max_epochs`` epochs more: a run planned for
    12 epochs, killed after 3 and started again, ends after 15. To finish
    the planned run instead, pass ``max_epochs=12`` here too
    (``LoadInitState(cp, max_epochs=12)``): training stops once the
    history holds 12 epochs, so the resumed fit trains the 9 that are
    missing (and none if the checkpoint already holds 12). Every callback
    sees the last epoch end as usual; the stop is skorch's clean one, as
    for ``EarlyStopping``. (By hand: ``est.set_params(max_epochs=12 -
    len(est.history_))`` after loading, then ``partial_fit``.)

    Parameters
    ----------
    checkpoint : Checkpoint or TrainEndCheckpoint
        The checkpoint to load.
    use_safetensors : bool, default=False
        For skorch's own checkpoints; a manifest says its format itself.
    max_epochs : int or None, default=None
        The epochs the whole run is planned for, counted in the history
        (the loaded epochs included); None: train the estimator's
        ``max_epochs`` after loading, as skorch does.

    Examples
    --------
    >>> import tempfile
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> X, y = make_sparse_selection(64, seq_len=5, token_dim=2, random_state=0)
    >>> cp = Checkpoint(monitor=None, dirname=tempfile.mkdtemp())
    >>> def run():
    ...     return SparseTokenFCN(hidden_width=8, max_epochs=2,
    ...                           callbacks=[cp, LoadInitState(cp)]).fit(X, y)
    >>> len(run().history_), len(run().history_)   # the second run continues the first
    (2, 4)
    >>> cp = Checkpoint(monitor=None, dirname=tempfile.mkdtemp())
    >>> def planned(max_epochs):  # the same plan of 3 epochs, however often it starts
    ...     return SparseTokenFCN(hidden_width=8, max_epochs=max_epochs,
    ...                           callbacks=[cp, LoadInitState(cp, max_epochs=3)]).fit(X, y)
    >>> len(planned(2).history_), len(planned(3).history_), len(planned(3).history_)
    (2, 3, 3)
    """

    def __init__(self, checkpoint, use_safetensors=False, max_epochs=None):
        super().__init__(checkpoint, use_safetensors=use_safetensors)
        self.max_epochs = max_epochs

    def initialize(self):
        super().initialize()
        planned = self.max_epochs
        if planned is not None and (isinstance(planned, bool) or not isinstance(planned, int)
                                    or planned < 1):
            raise ValueError(
                f"LoadInitState's max_epochs must be None or an int >= 1, the epochs the "
                f"whole run is planned for; got {planned!r}."
            )
        return self

    def on_epoch_begin(self, net, **kwargs):
        # skorch has opened the row of an epoch beyond the plan: close it, stop cleanly
        if self.max_epochs is not None and len(net.history) > self.max_epochs:
            net.history.pop()
            raise KeyboardInterrupt

    def on_train_begin(self, net, X=None, y=None, **kwargs):
        if not hasattr(self.checkpoint, "saved_files"):  # skorch's own checkpoint
            return super().on_train_begin(net, X=X, y=y, **kwargs)
        if self.did_load_:
            return
        self.did_load_ = True
        if self.checkpoint.exists():
            net.load_params(checkpoint=self.checkpoint, use_safetensors=self.use_safetensors)
