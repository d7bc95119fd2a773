"""The checkpoint callbacks: one whole epoch after a kill at any moment, failed saves warn.

- A training process with a Checkpoint every epoch, killed (SIGKILL) at 24 seeded
  moments inside and between its writes (mid-file, between files, between the
  manifest and the moves), leaves a checkpoint that a new estimator loads, with the
  weights, optimizer state and history of one and the same epoch.
- A checkpoint onto a full or read-only disk warns CheckpointWarning at verbose=0
  (an error under simplefilter("error")), and the previous one still loads.
- TrainEndCheckpoint and LoadInitState, safetensors, a damaged checkpoint.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from _tmpfs import fill, make_read_only, small_tmpfs
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal
from skorch.callbacks import Callback

import sparse_token_estimators
from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
from sparse_token_estimators.checkpoints import Checkpoint, LoadInitState, TrainEndCheckpoint
from sparse_token_estimators.exceptions import CheckpointWarning

X, Y = make_sparse_selection(32, 5, 2, n_selected=2, random_state=0)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(sparse_token_estimators.__file__))

# One source for the child and the test: a digest of the weights and optimizer state,
# recorded in the history every epoch, so a loaded checkpoint shows whether its three
# parts are of one epoch.
FINGERPRINT = textwrap.dedent("""
    import hashlib

    import torch
    from skorch.callbacks import Callback


    def fingerprint(net):
        h = hashlib.sha256()
        for key, value in net.module_.state_dict().items():
            h.update(key.encode() + value.detach().cpu().numpy().tobytes())
        for index, state in sorted(net.optimizer_.state_dict()["state"].items()):
            for key, value in sorted(state.items()):
                h.update(f"{index}{key}".encode())
                h.update(torch.as_tensor(value).cpu().numpy().tobytes())
        return h.hexdigest()


    class Fingerprint(Callback):
        def on_epoch_end(self, net, **kwargs):
            net.history.record("fingerprint", fingerprint(net))
""")
_namespace = {}
exec(FINGERPRINT, _namespace)  # noqa: S102 - the same code the child runs
fingerprint, Fingerprint = _namespace["fingerprint"], _namespace["Fingerprint"]


def make(**kwargs):
    return SparseTokenFCN(**{"hidden_width": 8, "max_epochs": 3, "batch_size": 16,
                             "random_state": 0, **kwargs})


def new_estimator():
    return make(seq_len=5, token_dim=2)


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


# -- killed at any moment -----------------------------------------------------------------

# The child imports torch once, then forks one training process per kill. Each counts
# the write, fsync, replace and unlink calls of the checkpoints (writes cut to 97 bytes,
# so a kill lands mid-file too) and SIGKILLs itself at its seeded count: every moment of
# the save protocol, reproducibly, and no timing. A dry run finds the counts of each
# epoch's manifest (commit) and end.
KILLER = FINGERPRINT + textwrap.dedent("""
    import json, os, signal, sys
    import numpy as np
    torch.set_num_threads(1)
    from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    from sparse_token_estimators.checkpoints import Checkpoint

    root, n_kills, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    X, y = make_sparse_selection(32, 5, 2, n_selected=2, random_state=0)
    # I/O calls so far; manifests written so far; (manifest, calls after it) to die at
    count, commits, kill = [0], [], [None]
    real = {name: getattr(os, name) for name in ("write", "fsync", "replace", "unlink")}

    def counted(name):
        def call(*args):
            count[0] += 1
            if kill[0] is not None and count[0] == kill[0]:
                os.kill(os.getpid(), signal.SIGKILL)
            if name == "write":
                return real["write"](args[0], args[1][:97])
            if name == "replace" and os.path.basename(args[1]) == "checkpoint.json":
                commits.append(count[0])  # the manifest: the epoch's commit
                if len(commits) == spec[0] + 1:
                    kill[0] = count[0] + spec[1]
            return real[name](*args)
        return call

    for name in real:
        setattr(os, name, counted(name))

    class Marks(Callback):  # the count after each epoch's checkpoint
        def on_epoch_end(self, net, **kwargs):
            marks.append(count[0])

    def train(directory, max_epochs, callbacks=()):
        cp = Checkpoint(monitor=None, dirname=directory)
        SparseTokenFCN(hidden_width=8, max_epochs=max_epochs, batch_size=16, random_state=0,
                       callbacks=[Fingerprint(), cp, *callbacks]).fit(X, y)

    marks, spec = [], (-1, 0)
    train(os.path.join(root, "dry"), 6, [Marks()])
    rng = np.random.default_rng(seed)
    # Counted from a manifest, so that the history's varying "dur" cannot shift them:
    # two thirds anywhere after the first manifest until the sixth epoch ends, a third
    # between a manifest and the end of its epoch's moves (a short window).
    specs = [(0, int(k)) for k in rng.integers(1, marks[5] - commits[0],
                                               size=n_kills - n_kills // 3)]
    specs += [(int(e), int(rng.integers(1, marks[e] - commits[e] + 1)))
              for e in rng.integers(1, 6, size=n_kills // 3)]
    killed = []
    for i, spec in enumerate(specs):
        pid = os.fork()
        if pid == 0:
            count[0], commits[:], kill[0] = 0, [], None
            train(os.path.join(root, f"run{i}"), 8)
            os._exit(3)  # not reached: the kill comes before the sixth epoch ends
        _, status = os.waitpid(pid, 0)
        killed.append(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)
    json.dump({"marks": marks, "specs": specs, "killed": killed},
              open(os.path.join(root, "kills.json"), "w"))
""")


def test_a_checkpoint_killed_at_any_moment_loads_one_whole_epoch(tmp_path):
    n_kills = 24
    subprocess.run([sys.executable, "-c", KILLER, str(tmp_path), str(n_kills), "0"],
                   check=True, timeout=300, env={**os.environ, "PYTHONPATH": PACKAGE_ROOT})
    report = json.loads((tmp_path / "kills.json").read_text())
    assert report["killed"] == [True] * n_kills
    steps_per_epoch = 2  # 32 sequences in batches of 16
    epochs, staged_used, torn_left = [], 0, 0
    for i in range(n_kills):
        directory = tmp_path / f"run{i}"
        cp = Checkpoint(monitor=None, dirname=str(directory))
        torn_left += any(p.name.endswith(".tmp") for p in directory.iterdir())
        saved = cp.saved_files()
        # the load removed what the killed write left, and nothing else
        assert not any(p.name.endswith(".tmp") for p in directory.iterdir()), f"run {i}"
        staged_used += any("staged" in what.split("'")[1] for what, _ in
                           saved["files"].values())
        est = new_estimator()
        est.load_params(checkpoint=cp)
        epoch = len(est.history_)
        epochs.append(epoch)
        assert epoch == saved["epoch"]
        # weights, optimizer and history of one epoch
        assert fingerprint(est) == est.history_[-1, "fingerprint"], f"run {i}"
        step = est.optimizer_.state_dict()["state"][0]["step"]
        assert int(step) == epoch * steps_per_epoch
    # the kills landed everywhere: in several epochs, mid-file (a torn
    # temporary file left) and between the manifest and the moves (a staged file loaded)
    assert len(set(epochs)) >= 4
    assert torn_left > 0 and staged_used > 0


# -- failed saves ----------------------------------------------------------------------


class FillDisk(Callback):
    """After the first epoch's checkpoint, fill (or make read-only) its file system."""

    def __init__(self, directory, how):
        self.directory = directory
        self.how = how

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) == 1:
            (fill if self.how == "full" else make_read_only)(self.directory)


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_a_checkpoint_that_cannot_be_written_warns_and_the_previous_one_loads(how, tmp_path):
    with small_tmpfs(tmp_path / "disk", size="128k") as disk:
        cp = Checkpoint(monitor=None, dirname=str(disk))
        record = RecordWeights()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = make(verbose=0, callbacks=[Fingerprint(), cp, ("record", record),
                                             FillDisk(disk, how)]).fit(X, Y)
        messages = [str(w.message) for w in caught if w.category is CheckpointWarning]
        assert len(messages) == 2  # epochs 2 and 3, at verbose=0
        cause = "the file system is full" if how == "full" else "the file system is read-only"
        assert "Checkpoint: epoch 2 was not saved: [Errno" in messages[0]
        assert cause in messages[0] and str(disk) in messages[0]
        assert "The checkpoint of epoch 1" in messages[0] and "still loads" in messages[0]
        assert est.history_[:, "event_cp"] == [True, False, False]
        loaded = new_estimator()
        loaded.load_params(checkpoint=cp)
        assert len(loaded.history_) == 1
        assert_same_weights(weights(loaded), record.per_epoch[0])


def test_simplefilter_error_turns_a_failed_checkpoint_into_an_error(tmp_path):
    with small_tmpfs(tmp_path / "disk", size="128k") as disk:
        cp = Checkpoint(monitor=None, dirname=str(disk))
        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)
            with pytest.raises(CheckpointWarning, match="epoch 2 was not saved"):
                make(callbacks=[cp, FillDisk(disk, "full")]).fit(X, Y)
        assert cp.saved_epoch() == 1


class RecordWeights(Callback):
    def initialize(self):
        self.per_epoch = []
        return self

    def on_epoch_end(self, net, **kwargs):
        self.per_epoch.append(weights(net))


# -- the other callbacks, formats and damage ------------------------------------------


def test_train_end_checkpoint_and_load_init_state_continue_a_run(tmp_path):
    end = TrainEndCheckpoint(dirname=str(tmp_path))
    first = make(callbacks=[end, LoadInitState(end)]).fit(X, Y)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "train_end_checkpoint.json", "train_end_criterion.pt", "train_end_history.json",
        "train_end_optimizer.pt", "train_end_params.pt"]
    loaded = new_estimator()
    loaded.load_params(checkpoint=end)
    assert_same_weights(weights(loaded), weights(first))
    second = make(callbacks=[end, LoadInitState(end)]).fit(X, Y)  # continues the first
    assert len(second.history_) == 6
    assert second.history_[:3, "train_loss"] == first.history_[:, "train_loss"]
    assert int(second.optimizer_.state_dict()["state"][0]["step"]) == 12  # 6 epochs of 2


def test_load_init_state_refuses_a_damaged_checkpoint_instead_of_starting_afresh(tmp_path):
    cp = Checkpoint(monitor=None, dirname=str(tmp_path))
    make(callbacks=[cp]).fit(X, Y)
    (tmp_path / "optimizer.pt").write_bytes(b"changed")
    with pytest.raises(ValueError, match=r"checkpoint in '.*checkpoint.json' \(epoch 3\) is "
                       r"incomplete: its f_optimizer '.*optimizer.pt' is missing or was "
                       r"changed"):
        make(callbacks=[cp, LoadInitState(cp)]).fit(X, Y)
    fresh = Checkpoint(monitor=None, dirname=str(tmp_path / "new"))
    assert len(make(callbacks=[fresh, LoadInitState(fresh)]).fit(X, Y).history_) == 3


def test_a_safetensors_checkpoint_loads_in_its_format(tmp_path):
    cp = Checkpoint(monitor=None, dirname=str(tmp_path), use_safetensors=True,
                    f_optimizer=None)
    est = make(callbacks=[cp]).fit(X, Y)
    loaded = new_estimator()
    loaded.load_params(checkpoint=cp)  # the manifest says safetensors
    assert_array_equal(loaded.predict(X), est.predict(X))


def test_a_checkpoint_of_skorch_or_of_0_1_0_still_loads(tmp_path):
    from skorch.callbacks import Checkpoint as SkorchCheckpoint

    old = SkorchCheckpoint(monitor=None, dirname=str(tmp_path))
    est = make(callbacks=[old]).fit(X, Y)
    ours = Checkpoint(monitor=None, dirname=str(tmp_path))  # no manifest there
    loaded = new_estimator()
    loaded.load_params(checkpoint=ours)
    assert_same_weights(weights(loaded), weights(est))
    with pytest.raises(FileNotFoundError, match="No checkpoint to load"):
        new_estimator().load_params(checkpoint=Checkpoint(dirname=str(tmp_path / "none")))


def test_checkpoint_names_per_epoch_keep_every_epoch(tmp_path):
    cp = Checkpoint(monitor=None, dirname=str(tmp_path),
                    f_params="params_{last_epoch[epoch]}.pt")
    make(callbacks=[cp]).fit(X, Y)
    assert {"params_1.pt", "params_2.pt", "params_3.pt"} <= {p.name for p in
                                                              tmp_path.iterdir()}
    assert not any(p.name.endswith((".staged", ".tmp")) for p in tmp_path.iterdir())
    loaded = new_estimator()
    loaded.load_params(checkpoint=cp)
    assert len(loaded.history_) == 3
    assert fingerprint is not None and np.isfinite(loaded.predict(X)).all()
