"""The store of a run trusts nothing it reads back, and touches nothing outside ``--out``.

Each case of issue 28's item 7 is here: a manifest naming paths out of the
folder (``..``, absolute, a symbolic link), a record copied over another's
file or edited by hand, damaged records, manifests and configuration files,
two runs on one folder, the files' modes, the temporary files of killed
writes, and a folder that becomes read-only part way. Every refusal is one
message naming the file and the fix, and every file is left as it was.
"""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparse_token_estimators import __main__ as cli
from sparse_token_estimators import reproduce
from sparse_token_estimators.reproduce import SMOKE, _records
from sparse_token_estimators.reproduce._fits import Fit

ROOT = Path(__file__).resolve().parents[1]
FIT = Fit("fcn", 8, SMOKE.seq_len)
RECORD = {"test_r2": 0.25, "train_r2": 0.5, "trace": [{"step": 0, "alignment": 0.0}]}


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if the command line gets as far as running anything."""
    monkeypatch.setattr(cli, "_run", lambda *a, **k: pytest.fail("the run started"))
    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)
    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's


def _after_the_plan(err):
    """stderr less the plan every run prints before its first fit ("plan: ..." and its
    indented lines)."""
    lines = err.strip().splitlines()
    while lines and (lines[0].startswith("plan:") or lines[0].startswith("  ")):
        lines.pop(0)
    return "\n".join(lines)


def _refused(out, capsys, *args):
    """Run the command line on ``out``; it must refuse (exit 2): its stderr."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["--out", str(out), "--no-plots", "--no-progress", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _snapshot(*folders):
    """Every file under ``folders`` (links not followed) with its bytes, for 'unchanged'.

    Not ``.lock``: a run that is refused has taken the folder's lock first
    (so that it reads a folder no other run is writing); the file stays, its
    lock goes with the process.
    """
    seen = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.name == ".lock":
                continue
            if path.is_symlink():
                seen[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                seen[str(path)] = path.read_bytes()
    return seen


def _a_run(out):
    """A folder as a finished run leaves it: records, results.json, a manifest."""
    store = _records.RecordStore(out, SMOKE)
    store.put(SMOKE, FIT, 0, RECORD)
    store.put(SMOKE, FIT, 1, {**RECORD, "test_r2": 0.75})
    _records.begin_outputs(out, ["results.json"])
    _records.write_atomic(out / "results.json", "{}")
    _records.finish_outputs(out, ["results.json"])
    return store


def _record_file(store, seed):
    return store._file(SMOKE, FIT, seed)


# -- paths: nothing outside --out is deleted or overwritten ---------------------------


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink", "nested"])
def test_a_manifest_naming_a_path_out_of_the_folder_removes_nothing(kind, tmp_path, capsys,
                                                                    no_run):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's")
    out = tmp_path / "out"
    out.mkdir()
    _a_run(out)
    entry = {"dotdot": "../victim.txt", "absolute": str(victim), "symlink": "link",
             "nested": "records/../../victim.txt"}[kind]
    if kind == "symlink":
        (out / "link").symlink_to(victim)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"].append(entry)
    (out / "manifest.json").write_text(json.dumps(manifest))
    before = _snapshot(tmp_path)
    expected = (f"{out / 'manifest.json'} lists {entry!r}, which a run never writes (it is "
                + ("a symbolic link leading out of the folder" if kind == "symlink" else
                   "not a plain file name inside the folder")
                + "). Nothing was removed; to go on, delete that manifest")
    for args in ([], ["--fresh"]):  # a plain rerun, and --fresh
        assert expected in _refused(out, capsys, *args)
        assert _snapshot(tmp_path) == before
    for call in (lambda: _records.discard_run(out),
                 lambda: _records.begin_outputs(out, ["results.json"]),
                 lambda: _records.foreign_files(out)):
        with pytest.raises(_records.StoreError, match="which a run never writes"):
            call()
        assert _snapshot(tmp_path) == before
    assert victim.read_text() == "not the run's"


def test_records_that_are_a_link_out_of_the_folder_are_neither_read_nor_removed(
        tmp_path, capsys, no_run):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.json").write_text("[]")
    out = tmp_path / "out"
    out.mkdir()
    (out / "records").symlink_to(elsewhere, target_is_directory=True)
    before = _snapshot(tmp_path)
    with pytest.raises(_records.StoreError, match=r"records is not a folder of this run \(a "
                       r"symbolic link or a file\): no record is read or written there"):
        _records.RecordStore(out, SMOKE)
    with pytest.raises(_records.StoreError, match="is a symbolic link, not the folder of this "
                       "run's records: --fresh removes nothing through it"):
        _records.discard_run(out)
    assert "--fresh removes nothing through it" in _refused(out, capsys, "--fresh")
    assert "no record is read or written there" in _refused(out, capsys)
    assert _snapshot(tmp_path) == before


# -- records: used only if they are what their name says -------------------------------


def _copy_seed_1_over_seed_0(store):
    _record_file(store, 0).write_bytes(_record_file(store, 1).read_bytes())


def _edit_a_number(store):
    path = _record_file(store, 0)
    content = json.loads(path.read_text())
    content["record"]["test_r2"] = 0.99
    path.write_text(json.dumps(content))


def _paste(store, source):
    """Another record's numbers and their digest pasted into the seed-0 file of FIT."""
    path = _record_file(store, 0)
    content, other = json.loads(path.read_text()), json.loads(source.read_text())
    content["record"], content["digest"] = other["record"], other["digest"]
    path.write_text(json.dumps(content))


def _paste_another_fits_numbers(store):
    wider = Fit("fcn", 256, SMOKE.seq_len)
    store.put(SMOKE, wider, 0, {**RECORD, "test_r2": 0.9})
    _paste(store, store._file(SMOKE, wider, 0))


def _paste_seed_1s_numbers(store):
    _paste(store, _record_file(store, 1))


def _format_2(store):
    """The seed-0 record as the version before wrote it: a digest of the numbers alone."""
    path = _record_file(store, 0)
    content = json.loads(path.read_text())
    content["format"] = 2
    content["digest"] = _records._digest(content["record"])
    path.write_text(json.dumps(content))


def _truncate(store):
    path = _record_file(store, 0)
    path.write_bytes(path.read_bytes()[:40])


def _write(data):
    return lambda store: _record_file(store, 0).write_bytes(data)


def _from_another_configuration(store):
    other = reproduce.with_sizes(SMOKE, n_samples=48)
    elsewhere = _records.RecordStore(store.out.parent / "other", other)
    elsewhere.put(other, FIT, 0, RECORD)
    # its name, as this folder's seed-0 file: only its content can tell
    _record_file(store, 0).write_bytes(elsewhere._file(other, FIT, 0).read_bytes())


def _old_format(store):
    _record_file(store, 0).write_text(json.dumps(
        {"fit": {"model": "fcn"}, "seed": 0, "record": RECORD}))


RECORD_CASES = {
    "seed 1 copied over seed 0": (
        _copy_seed_1_over_seed_0,
        "cannot be trusted: it holds the record of the fit (model='fcn', width=8, seq_len=4, "
        "data='sample', n_train=0, max_steps=0), seed 1, not that of the fit and seed its "
        "name says (a record copied or renamed over another's?)"),
    "a number edited by hand": (
        _edit_a_number,
        "cannot be trusted: its numbers are not those written for the fit and seed it names "
        "(their digest differs: edited by hand, damaged, or another record's numbers pasted "
        "in)"),
    "another record's numbers and digest pasted in": (
        _paste_another_fits_numbers,
        "cannot be trusted: its numbers are not those written for the fit and seed it names "
        "(their digest differs: edited by hand, damaged, or another record's numbers pasted "
        "in)"),
    "seed 1's numbers and digest pasted into seed 0's": (
        _paste_seed_1s_numbers,
        "cannot be trusted: its numbers are not those written for the fit and seed it names"),
    "a record of format 2": (
        _format_2,
        "cannot be trusted: it is a record of format 2 (written by an earlier version, whose "
        "digest did not say which fit the numbers are of), this version reads format 3"),
    "truncated": (_truncate, "(a record of a finished fit) is damaged: it is not JSON, or is "
                             "cut short (Unterminated string starting at byte "),
    "garbage": (_write(b"\x13\xff\xfe garbage"), "(a record of a finished fit) is damaged: it "
                                                 "is not UTF-8 text (byte 1 is b'\\xff')"),
    "not JSON": (_write(b"certainly not json"), "is damaged: it is not JSON, or is cut short "
                                                "(Expecting value at byte 0 of 18)"),
    "empty": (_write(b""), "(a record of a finished fit) is damaged: it is empty"),
    "{}": (_write(b"{}"), "is not a record of a finished fit (it holds no 'format', no 'fit', "
                          "no 'seed', no 'config', no 'record', no 'digest'"),
    "a list": (_write(b"[1, 2]"), "is not a record of a finished fit (it holds a JSON list"),
    "the format before": (_old_format, "(it holds no 'format', no 'config', no 'digest')"),
    "another configuration's": (_from_another_configuration,
                                "cannot be trusted: it was made with another configuration "
                                "than this run's"),
}
FIX = "delete that file (what it held is made again) or pass --fresh to start from zero."
CONFIG_FIX = ("delete that file (it is written again from this run's configuration; each "
              "record names its own) or pass --fresh to start from zero.")


@pytest.mark.parametrize("case", RECORD_CASES)
def test_a_record_that_is_not_what_its_name_says_is_refused(case, tmp_path, capsys, no_run):
    damage, message = RECORD_CASES[case]
    out = tmp_path / "out"
    out.mkdir()
    store = _a_run(out)
    opened = _records.RecordStore(out, SMOKE)  # opened while the records were whole
    damage(store)
    path = _record_file(store, 0)
    before = _snapshot(tmp_path)
    # when the run opens the folder (every record is checked before any fit) ...
    with pytest.raises(_records.StoreError) as exc:
        _records.RecordStore(out, SMOKE)
    assert str(exc.value).startswith(str(path)) and message in str(exc.value)
    assert str(exc.value).endswith(FIX)
    # ... and when a record changes under a store already open
    with pytest.raises(_records.StoreError) as exc:
        opened.get(SMOKE, FIT, 0)
    assert message in str(exc.value) and str(exc.value).endswith(FIX)
    assert opened.get(SMOKE, FIT, 1)["test_r2"] == 0.75  # the others are still read
    err = _refused(out, capsys)
    assert f"error: argument --out: {path}" in err and message in err and FIX in err
    assert _snapshot(tmp_path) == before


def test_the_fix_that_the_message_names_works(tmp_path, capsys, no_run):
    out = tmp_path / "out"
    out.mkdir()
    store = _a_run(out)
    _copy_seed_1_over_seed_0(store)
    _record_file(store, 0).unlink()  # delete that file: its fit is then made again
    again = _records.RecordStore(out, SMOKE)
    assert again.get(SMOKE, FIT, 0) is None and again.get(SMOKE, FIT, 1)["test_r2"] == 0.75
    _copy_seed_1_over_seed_0(store)
    lock, fresh = cli._open_out(cli.build_parser(), cli.build_parser().parse_args(
        ["--out", str(out), "--fresh"]), SMOKE)  # or --fresh
    lock.release()
    assert len(fresh) == 0 and sorted(p.name for p in out.iterdir()) == [".lock", "records"]
    store = _a_run(out)
    (out / "records" / "config.json").write_bytes(b"\xff")
    (out / "records" / "config.json").unlink()  # the fix for it: each record names its own
    assert _records.RecordStore(out, SMOKE).get(SMOKE, FIT, 1)["test_r2"] == 0.75


def test_a_record_found_damaged_mid_run_is_one_line(tmp_path, monkeypatch, capsys):
    def run(args, argv, config, store):
        _copy_seed_1_over_seed_0(_a_run(tmp_path))
        return store.get(SMOKE, FIT, 0)

    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)

    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's
    monkeypatch.setattr(cli, "_run", run)
    assert cli.main(["--out", str(tmp_path), "--no-plots", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sparse-token-reproduce: error: {tmp_path / 'records'}")
    assert len(err.splitlines()) == 1 and "cannot be trusted: it holds the record of" in err


# -- the manifest and the records' configuration file -----------------------------------


@pytest.mark.parametrize("name, data, message", [
    ("manifest.json", b'{"files": ["results.js', "manifest.json (the list of the files of the "
     "earlier run) is damaged: it is not JSON, or is cut short (Unterminated string starting "
     "at byte 11 of 22). To go on, delete that manifest"),
    ("manifest.json", b"\x89PNG\r\n", "manifest.json (the list of the files of the earlier "
     "run) is damaged: it is not UTF-8 text (byte 0 is b'\\x89')"),
    ("manifest.json", b"[]", "manifest.json (the list of the files of the earlier run) is "
     "damaged: it holds no list of 'files'. Nothing was removed; to go on, delete that "
     "manifest"),
    ("manifest.json", b'{"files": "results.json"}', "holds no list of 'files'"),
    ("records/config.json", b"{garbage", "config.json (the configuration of the records) is "
     "damaged: it is not JSON, or is cut short (Expecting property name enclosed in double "
     "quotes at byte 1 of 8). To go on, " + CONFIG_FIX),
    ("records/config.json", b"\xff\xff", "config.json (the configuration of the records) is "
     "damaged: it is not UTF-8 text (byte 0 is b'\\xff')"),
    ("records/config.json", b"[1]", "config.json (the configuration of the records) is "
     "damaged: it holds a JSON list, not the fields of a configuration. To go on, "
     + CONFIG_FIX),
])
def test_a_damaged_manifest_or_configuration_file_is_a_clear_error(name, data, message,
                                                                   tmp_path, capsys, no_run):
    out = tmp_path / "out"
    out.mkdir()
    _a_run(out)
    (out / name).write_bytes(data)
    before = _snapshot(tmp_path)
    err = _refused(out, capsys)
    assert f"error: argument --out: {out / name}" in err and message in err
    assert _snapshot(tmp_path) == before
    if name == "manifest.json":  # --fresh cannot tell the run's files either
        assert message in _refused(out, capsys, "--fresh")
        assert _snapshot(tmp_path) == before


# -- one run at a time -----------------------------------------------------------------


def test_a_second_lock_on_a_folder_is_refused_naming_the_first(tmp_path):
    first = _records.RunLock(tmp_path, "sparse-token-reproduce --out x").acquire()
    # flock locks belong to an open file: a second open in this process conflicts too
    with pytest.raises(_records.OutLocked, match=(
            rf"{tmp_path} is in use by another run \(PID {os.getpid()}: sparse-token-reproduce "
            r"--out x\): one run at a time per folder; wait for it to end or choose another "
            r"--out")):
        _records.RunLock(tmp_path).acquire()
    first.release()
    with _records.RunLock(tmp_path) as second:  # free again once released
        assert (tmp_path / ".lock").read_text() == f"PID {os.getpid()}\n"
    assert second._fd is None


def test_a_lock_file_that_is_a_link_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".lock").symlink_to(victim)
    with pytest.raises(_records.StoreError, match="lock file .* is a symbolic link"):
        _records.RunLock(tmp_path / "out").acquire()
    assert victim.read_text() == "not the run's"


def test_a_second_run_on_a_folder_is_refused_naming_the_first_ones_process(tmp_path, capsys,
                                                                         no_run):
    out = tmp_path / "out"
    out.mkdir()
    _a_run(out)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from sparse_token_estimators.reproduce import _records\n"
         f"lock = _records.RunLock({str(out)!r}, 'the first run').acquire()\n"
         "print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline() == "locked\n"
        before = _snapshot(out)
        for args in ([], ["--fresh"]):  # --fresh discards nothing of a running run
            err = _refused(out, capsys, *args)
            assert (f"error: argument --out: {out} is in use by another run (PID {holder.pid}: "
                    "the first run): one run at a time per folder") in err
            assert _snapshot(out) == before
    finally:
        holder.stdin.close()
        holder.wait()
    assert holder.returncode == 0
    with _records.RunLock(out):  # its lock went with its process
        pass


# -- modes, and the temporary files of killed writes -----------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_umasks_mode(umask, mode, tmp_path):
    previous = os.umask(umask)
    try:
        store = _a_run(tmp_path)
    finally:
        os.umask(previous)
    for path in (_record_file(store, 0), tmp_path / "records" / "config.json",
                 tmp_path / "results.json", tmp_path / "manifest.json"):
        assert path.stat().st_mode & 0o777 == mode, path


def test_the_temporary_files_of_killed_writes_are_removed_at_the_next_start(
        tmp_path, monkeypatch, capsys):
    from sparse_token_estimators import _files

    out = tmp_path / "out"
    out.mkdir()
    store = _a_run(out)
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's")

    def killed(*args):  # the process dies between writing the temporary file and renaming it
        raise SystemExit("killed")

    monkeypatch.setattr(_files.os, "replace", killed)
    with pytest.raises(SystemExit):
        store.put(SMOKE, FIT, 2, RECORD)
    with pytest.raises(SystemExit):
        _records.write_atomic(out / "results.json", "new")
    monkeypatch.undo()
    left = sorted(p.name for p in [*out.iterdir(), *(out / "records").iterdir()]
                  if _files.is_temporary(p.name))
    assert len(left) == 2 and (out / "results.json").read_text() == "{}"
    (out / ".evil.0badf00d.tmp").symlink_to(victim)  # a link with a temporary file's name
    (out / ".folder.12345678.tmp").mkdir()  # not a file: not the writer's
    assert _records.foreign_files(out) == []  # never counted as another's files
    monkeypatch.setattr(cli, "_run", lambda *a, **k: 0)  # the start of a run, no fits
    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)
    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's
    assert cli.main(["--out", str(out), "--no-plots", "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".folder.12345678.tmp", ".lock", "manifest.json", "records", "results.json"]
    assert not any(_files.is_temporary(p.name) for p in (out / "records").iterdir())
    assert victim.read_text() == "not the run's"
    assert len(_records.RecordStore(out, SMOKE)) == 2


# -- a folder that cannot be written part way ------------------------------------------


def test_an_out_made_read_only_mid_run_is_one_line_and_keeps_the_fits(tmp_path, monkeypatch,
                                                                       capsys):
    from sparse_token_estimators import _files

    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)

    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's
    out = tmp_path / "out"
    write_files = _files.write_files

    def read_only_after_two_records(items):
        # the kernel's answer once the folder's file system is remounted read-only
        if len(list((out / "records").glob("*-s*.json"))) >= 2:
            path, _, what = items[0]
            raise _files._save_error(OSError(errno.EROFS, os.strerror(errno.EROFS)), path, what)
        return write_files(items)

    monkeypatch.setattr(_files, "write_files", read_only_after_two_records)
    code = cli.main(["--out", str(out), "--no-plots", "--no-progress", "--n-jobs", "1"])
    err = _after_the_plan(capsys.readouterr().err)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"sparse-token-reproduce: error: cannot write into {out}: Could not "
                          "save the record of the fit (")
    assert ("the file system is read-only. Save into a writable directory; nothing was "
            "written, the file there (if any) is unchanged. The 2 finished") in err
    assert err.endswith(f"The 2 finished fit(s) in {out / 'records'} are kept; make the folder "
                        "writable and run the same command again: sparse-token-reproduce "
                        f"--out {out} --no-plots --no-progress --n-jobs 1")
    monkeypatch.undo()
    assert len(_records.RecordStore(out, SMOKE)) == 2  # each one whole and trusted


def test_an_out_on_a_file_system_remounted_read_only_mid_run(tmp_path, monkeypatch, capsys):
    # the same on a real file system (a tmpfs, remounted read-only after two records)
    from _tmpfs import make_read_only, small_tmpfs

    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)

    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's
    with small_tmpfs(tmp_path / "disk", size="4m") as disk:
        out = disk / "out"
        put = _records.RecordStore.put

        def then_read_only(store, *args):
            put(store, *args)
            if len(store) == 2:
                make_read_only(disk)

        monkeypatch.setattr(_records.RecordStore, "put", then_read_only)
        code = cli.main(["--out", str(out), "--no-plots", "--no-progress", "--n-jobs", "1"])
        err = _after_the_plan(capsys.readouterr().err)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"sparse-token-reproduce: error: cannot write into {out}: ")
        assert "the file system is read-only" in err
        assert f"The 2 finished fit(s) in {out / 'records'} are kept" in err
        assert len(_records.RecordStore(out, SMOKE)) == 2


def _key(row):
    return tuple(row[k] for k in ("model", "width", "seq_len", "data", "n_train", "max_steps",
                                  "lr"))


def test_a_run_with_more_seeds_or_other_experiments_reuses_the_records_it_shares(tmp_path):
    """``n_seeds`` and ``experiments`` change how much of a run runs, never a record's
    numbers: a second run in the same folder resumes every (fit, seed) the first made."""
    from dataclasses import replace

    first = replace(SMOKE, n_seeds=1, experiments=("fcn_tightness",))
    store = _records.RecordStore(tmp_path, first)
    one = reproduce.run(first, progress=False, store=store)
    assert store.resumed == 0 and {f["seed"] for f in one["fits"]} == {0}
    seed0 = {_key(f): f["val_r2"]
             for f in one["fits"]}

    second = replace(SMOKE, n_seeds=2, experiments=("fcn_tightness", "width_scaling"))
    store = _records.RecordStore(tmp_path, second)
    two = reproduce.run(second, progress=False, store=store)
    again = {_key(f): f["val_r2"]
             for f in two["fits"] if f["seed"] == 0}
    shared = seed0.keys() & again.keys()  # the searches' paths follow the mean over seeds
    assert store.resumed == len(shared) > len(seed0) // 2
    assert {k: again[k] for k in shared} == {k: seed0[k] for k in shared}
    assert {f["seed"] for f in two["fits"]} == {0, 1}
    # a field that sets numbers still refuses the folder, naming it
    with pytest.raises(_records.StoreError, match="n_samples"):
        _records.RecordStore(tmp_path, replace(second, n_samples=48))
