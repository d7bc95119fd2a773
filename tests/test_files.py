"""The package's files: errors that name the file, what was found and the fix; failed saves
that change no file (a directory, a missing directory, a full and a read-only disk).
"""

import io

import numpy as np
import pytest
import torch
from _tmpfs import fill, make_read_only, small_tmpfs
from _weights import assert_same_weights, weights
from numpy.testing import assert_array_equal

from sparse_token_estimators import SparseTokenFCN, make_sparse_selection

X, Y = make_sparse_selection(120, 6, 3, n_selected=2, random_state=0)
X_TEST, _ = make_sparse_selection(50, 6, 3, n_selected=2, random_state=1)
SIZES = {"fcn": dict(seq_len=6, token_dim=3)}


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def make(name="fcn", **kwargs):
    return SparseTokenFCN(**{"hidden_width": 16, "max_epochs": 2, "random_state": 0, **kwargs})


def _state(est):
    return weights(est), est.predict(X_TEST), est.history_.to_list()


def _assert_unchanged(est, before):
    after = _state(est)
    assert_same_weights(after[0], before[0])
    assert_array_equal(after[1], before[1])
    assert after[2] == before[2]


def test_unreadable_weights_files_name_the_file_what_it_is_and_the_fix(tmp_path):
    est = make("fcn").fit(X, Y)
    before = _state(est)
    est.save_params(f_params=tmp_path / "w.pt")
    est.save_params(f_params=tmp_path / "w.safetensors", use_safetensors=True)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x13" + np.random.default_rng(0).bytes(999))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes((tmp_path / "w.pt").read_bytes()[:300])
    cases = [
        (junk, False, r"junk.pt' could not be read as a torch file: it is neither a torch nor "
                      r"a safetensors file .*Pass the file written by save_params"),
        (junk, True, r"junk.pt' is not a safetensors file: it is neither"),
        (tmp_path / "w.pt", True, r"w.pt' is not a safetensors file: it is a torch file "
                                  r"\(a zip archive\).*pass use_safetensors=False"),
        (tmp_path / "w.safetensors", False, r"w.safetensors' could not be read as a torch "
                                            r"file: it is a safetensors file.*pass "
                                            r"use_safetensors=True"),
        (truncated, False, r"truncated.pt' could not be read as a torch file: it is a torch "
                           r"file \(a zip archive\) that torch cannot read.*save it again"),
        (tmp_path / "h.json", False, None),
    ]
    (tmp_path / "h.json").write_text("[]")
    for path, safetensors, message in cases:
        if message is None:
            message = r"h.json' could not be read as a torch file: it is a JSON file"
        with pytest.raises(ValueError, match=message):
            est.load_params(f_params=path, use_safetensors=safetensors)
        _assert_unchanged(est, before)
    with pytest.raises(FileNotFoundError):
        est.load_params(f_params=tmp_path / "absent.pt")
    with pytest.raises(ValueError, match=r"f_history '.*w.pt' is not a history file"):
        est.load_params(f_history=tmp_path / "w.pt")


def test_saving_onto_a_directory_raises_naming_it(tmp_path):
    est = make("fcn").fit(X, Y)
    (tmp_path / "w.pt").mkdir()
    with pytest.raises(IsADirectoryError, match=r"Could not save the weights \(f_params\) to "
                       r"'.*w.pt': it is a directory. Pass a file path"):
        est.save_params(f_params=tmp_path / "w.pt")
    with pytest.raises(FileNotFoundError, match=r"the directory '.*absent' does not exist"):
        est.save_params(f_params=tmp_path / "absent" / "w.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt"]  # no temporary file left


def test_a_save_onto_a_full_disk_raises_and_keeps_the_old_files(tmp_path):
    old = make("fcn").fit(X, Y)
    new = make("fcn", random_state=1, hidden_width=64).fit(X, Y)
    with small_tmpfs(tmp_path / "disk", size="64k") as disk:
        old.save_params(f_params=disk / "w.pt", f_history=disk / "h.json")
        saved = {p.name: p.read_bytes() for p in disk.iterdir()}
        fill(disk)
        with pytest.raises(OSError, match=r"Could not save the weights \(f_params\) to '.*w.pt': "
                           r"the file system is full.*the file there \(if any\) is unchanged"):
            new.save_params(f_params=disk / "w.pt", f_history=disk / "h.json")
        for name, data in saved.items():
            assert (disk / name).read_bytes() == data
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "filler2", "h.json", "w.pt"]
        loaded = make("fcn", **SIZES["fcn"]).initialize()
        loaded.load_params(f_params=disk / "w.pt")
        assert_array_equal(loaded.predict(X_TEST), old.predict(X_TEST))


def test_a_save_into_a_read_only_directory_raises_naming_it(tmp_path):
    est = make("fcn").fit(X, Y)
    with small_tmpfs(tmp_path / "disk", size="256k") as disk:
        est.save_params(f_params=disk / "w.pt")
        make_read_only(disk)
        for safetensors in (False, True):
            with pytest.raises(OSError, match=r"Could not save the weights \(f_params\) to "
                               r"'.*w.pt': the file system is read-only. Save into a writable"):
                est.save_params(f_params=disk / "w.pt", use_safetensors=safetensors)
        assert [p.name for p in disk.iterdir()] == ["w.pt"]


# -- nothing the package opens can block: a FIFO by a package file's name ---------------


@pytest.fixture
def bounded():
    """Fail, rather than hang the suite, if the test blocks (opening a FIFO waits for a
    writer): SIGALRM interrupts the blocked call and raises here."""
    import signal

    def hung(signum, frame):
        raise AssertionError("blocked for 60 s on a FIFO: no file of the package may be "
                             "opened in a way that blocks")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


needs_fifo = pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"),
                                reason="no FIFOs on this platform")


@needs_fifo
@pytest.mark.parametrize("use_safetensors", [False, True])
def test_a_fifo_named_like_a_temporary_file_is_left_alone_by_save_and_load(
        tmp_path, bounded, use_safetensors):
    import os

    est = make().fit(X, Y)
    fifo = tmp_path / ".w.st.0123abcd.tmp"  # the name of a killed save's temporary file
    os.mkfifo(fifo)
    est.save_params(f_params=tmp_path / "w.st", use_safetensors=use_safetensors)
    new = make(**SIZES["fcn"]).initialize()
    new.load_params(f_params=tmp_path / "w.st", use_safetensors=use_safetensors)
    assert_same_weights(weights(new), weights(est))
    assert fifo.is_fifo()  # not opened, not removed: not a file the package wrote


@needs_fifo
def test_a_fifo_in_a_checkpoint_is_refused_naming_it(tmp_path, bounded):
    import os

    from sparse_token_estimators.checkpoints import Checkpoint

    cp = Checkpoint(monitor=None, dirname=str(tmp_path / "cp"))
    est = make(callbacks=[cp]).fit(X, Y)
    os.mkfifo(tmp_path / "cp" / ".params.pt.0123abcd.tmp")
    new = make(**SIZES["fcn"]).initialize()
    new.load_params(checkpoint=cp)  # the stale-file cleanup passes the FIFO by
    assert_same_weights(weights(new), weights(est))
    manifest = tmp_path / "cp" / "checkpoint.json"
    manifest.unlink()
    os.mkfifo(manifest)
    with pytest.raises(ValueError, match=r"manifest '.*checkpoint.json' is a FIFO \(named "
                                         r"pipe\), not a regular file.*Delete or move it"):
        make(**SIZES["fcn"]).initialize().load_params(checkpoint=cp)


@needs_fifo
def test_a_record_save_passes_a_fifo_named_like_a_temporary_file(tmp_path, bounded):
    import os

    from sparse_token_estimators.reproduce import _records

    os.mkfifo(tmp_path / ".results.json.0123abcd.tmp")
    _records.write_atomic(tmp_path / "results.json", "{}")
    assert (tmp_path / "results.json").read_text() == "{}"
    assert (tmp_path / ".results.json.0123abcd.tmp").is_fifo()


@pytest.mark.parametrize("use_safetensors", [False, True])
def test_weights_that_view_a_larger_tensor_are_saved_alone(use_safetensors):
    # a fit trained side by side (trainer="fused") holds its weights as a row of the
    # group's stacked ones: a save in the middle of it writes that row, not the stack
    from sparse_token_estimators._files import state_bytes

    alone = torch.nn.Linear(16, 16)
    stacked = torch.randn(9, 16, 16)
    row = torch.nn.Linear(16, 16)
    with torch.no_grad():
        row.weight = torch.nn.Parameter(stacked[4])  # a view of the stack's storage
        alone.weight.copy_(stacked[4])
        alone.bias.copy_(row.bias)
    data = state_bytes(row, use_safetensors)
    assert len(data) == len(state_bytes(alone, use_safetensors))
    if not use_safetensors:
        loaded = torch.load(io.BytesIO(data), weights_only=True)
        assert torch.equal(loaded["weight"], stacked[4])
        assert loaded["weight"].untyped_storage().nbytes() == 16 * 16 * 4
    assert row.weight.data_ptr() == stacked[4].data_ptr()  # the module's own are untouched
