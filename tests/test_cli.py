"""The command line before, during and after a run: checked first, resumable, never mixed.

Every bad argument is a usage error (exit status 2) naming it before any fit;
a run stopped at any fit (or killed with SIGKILL) and run again gives the
results of an uninterrupted run; the output folder holds one run, its
results.json strict JSON.
"""

import contextlib
import errno
import json
import math
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparse_token_estimators import __main__ as cli
from sparse_token_estimators import reproduce
from sparse_token_estimators.reproduce import SMOKE, _records, _run
from sparse_token_estimators.reproduce._fits import Fit

ROOT = Path(__file__).resolve().parents[1]

#: keys that hold times, which differ between runs of the same numbers
TIMES = ("fit_s", "score_s", "fit_cpu_s", "elapsed_s", "started_at", "ended_at", "worker",
         "invocation", "n_workers", "plan")


def _refuse_nan(name):
    raise ValueError(f"not strict JSON: {name}")


def _without_times(value):
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items()
                if not any(k == t or k.startswith(t + "_") for t in TIMES)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


@pytest.fixture
def no_fit(monkeypatch):
    """Fail the test if any fit starts."""
    def dispatch(*args, **kwargs):
        raise AssertionError("a fit ran before the arguments were checked")

    monkeypatch.setattr(_run, "dispatch", dispatch)


@pytest.fixture
def smoke_scale(monkeypatch):
    monkeypatch.setitem(reproduce.SCALES, "quick", SMOKE)
    monkeypatch.setitem(reproduce.SCALES, "first", SMOKE)  # a bare command's


def _usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--no-plots", "--no-progress"])
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--scale", "huge"], "invalid choice"),
    (["--n-selected", "12", "--seq-len", "10"], "n_selected must be between 1 and seq_len"),
    (["--n-jobs", "0"], "argument --n-jobs: 0 fits in parallel has no meaning"),
    (["--seed", "-1"], "argument --seed: expected an integer >= 0; got -1"),
    (["--seed", "4294967296"], "argument --seed: seeds are 0 to 2**32 - 1"),
    (["--seed", "4294967295", "--seeds", "2"], "seed must be between 0 and 2**32 - 1"),
    (["--seq-len", "1", "--n-selected", "1"], "--seq-len/--n-selected: n_selected must be "
                                              "between 1 and seq_len - 1"),
    (["--seq-len", "4", "--n-selected", "4"], "got n_selected=4 with seq_len=4"),
    (["--n-samples", "0"], "argument --n-samples: expected an integer >= 1; got 0"),
    (["--seeds", "two"], "argument --seeds: expected an integer >= 1; got 'two'"),
    (["--architecture-seeds", "0"], "argument --architecture-seeds: expected an integer >= 1; "
                                    "got 0"),
    (["--device", "tpu"], "--device: device must be"),
    (["--trainer", "vmap"], "--trainer: trainer must be 'exact' (every fit alone"),
])
def test_bad_arguments_are_usage_errors_before_any_fit(argv, message, no_fit, smoke_scale,
                                                       tmp_path, capsys):
    out = tmp_path / "out"
    assert message in _usage_error([*argv, "--out", str(out)], capsys)
    assert not out.exists()  # nothing written for a refused command


def test_the_trainer_goes_from_the_command_line_to_the_configuration(smoke_scale):
    parser = cli.build_parser()
    for argv, trainer in (([], "exact"), (["--trainer", "fused"], "fused")):
        config = cli._build_config(parser, parser.parse_args(argv))
        assert config.trainer == trainer


def test_out_under_a_regular_file_is_refused_before_any_fit(no_fit, tmp_path, capsys):
    (tmp_path / "file").write_text("a file")
    err = _usage_error(["--out", str(tmp_path / "file" / "out")], capsys)
    assert "argument --out: cannot write into" in err and "Not a directory" in err
    err = _usage_error(["--out", str(tmp_path / "file")], capsys)
    assert "argument --out: cannot write into" in err
    assert (tmp_path / "file").read_text() == "a file"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="permissions do not bind root")
def test_read_only_out_is_refused_before_any_fit(no_fit, tmp_path, capsys):
    tmp_path.chmod(0o500)
    try:
        err = _usage_error(["--out", str(tmp_path / "out")], capsys)
    finally:
        tmp_path.chmod(0o700)
    assert "argument --out: cannot write into" in err and "Permission denied" in err


def test_out_on_a_read_only_file_system_is_refused_before_any_fit(no_fit, tmp_path, capsys,
                                                                  monkeypatch):
    # the machines that run the suite run it as root, where permissions bind
    # nothing: a read-only file system, as the kernel reports it to a write
    original = Path.write_text

    def write_text(path, *args, **kwargs):
        if path.parent == tmp_path / "out":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    err = _usage_error(["--out", str(tmp_path / "out")], capsys)
    assert "argument --out: cannot write into" in err and "Read-only file system" in err
    assert not (tmp_path / "out").exists()  # the folder it made for the run is gone


def test_an_unreachable_scheduler_is_refused_before_any_fit(no_fit, tmp_path, capsys):
    pytest.importorskip("distributed")
    # port 9 (discard) on the loopback: nothing listens there
    err = _usage_error(["--out", str(tmp_path), "--scheduler", "tcp://127.0.0.1:9"], capsys)
    assert "argument --scheduler: nothing accepts a connection at tcp://127.0.0.1:9" in err
    err = _usage_error(["--out", str(tmp_path), "--scheduler", "127.0.0.1"], capsys)
    assert "is not an address such as tcp://host:8786" in err


@pytest.fixture
def bounded():
    """Fail, rather than hang the suite, if the test blocks (a FIFO, a silent peer)."""
    def hung(signum, frame):
        raise AssertionError("blocked for 60 s: the command line must never block")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def silent_server():
    """A TCP server on the loopback that accepts connections and never answers."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def accept():
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for connection in held:
        connection.close()


def test_a_port_that_is_no_dask_scheduler_is_refused_at_once(no_fit, tmp_path, capsys,
                                                               monkeypatch, bounded,
                                                               silent_server):
    pytest.importorskip("distributed")
    monkeypatch.setattr(cli, "SCHEDULER_TIMEOUT", 0.5)
    out = tmp_path / "out"
    err = _usage_error(["--out", str(out), "--scheduler", silent_server], capsys)
    assert (f"argument --scheduler: {silent_server} accepts a connection but is not a Dask "
            "scheduler (no answer to Dask's identity request within 0.5 s); check the host "
            "and the port") in err
    assert not out.exists()


def test_tls_on_a_plain_tcp_port_is_refused_at_once(no_fit, tmp_path, capsys, monkeypatch,
                                                     bounded, silent_server):
    pytest.importorskip("distributed")
    monkeypatch.setattr(cli, "SCHEDULER_TIMEOUT", 0.5)
    address = silent_server.replace("tcp://", "tls://")
    out = tmp_path / "out"
    err = " ".join(_usage_error(["--out", str(out), "--scheduler", address], capsys).split())
    assert (f"argument --scheduler: {address} accepts a connection but does not answer a TLS "
            "handshake within 0.5 s (a plain TCP port?); check the host and the port, or use "
            f"{silent_server} if the scheduler does not use TLS") in err
    assert not out.exists()


def test_a_peer_that_answers_no_tls_is_told_from_one_that_sends_a_tls_alert():
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_once(reply):
        connection = server.accept()[0]
        connection.recv(4096)
        connection.sendall(reply)
        connection.close()

    # bytes that are no TLS record (a Dask or HTTP server's answer): not TLS
    threading.Thread(target=answer_once, args=(b"HTTP/1.1 400 Bad Request\r\n\r\n",),
                     daemon=True).start()
    assert not cli._speaks_tls("127.0.0.1", port, 5)
    # a TLS alert record (handshake_failure: e.g. a client certificate it requires): TLS
    alert = bytes([21, 3, 3, 0, 2, 2, 40])
    threading.Thread(target=answer_once, args=(alert,), daemon=True).start()
    assert cli._speaks_tls("127.0.0.1", port, 5)
    server.close()


def test_a_websocket_scheduler_where_nothing_listens_is_refused_at_once(no_fit, tmp_path,
                                                                        capsys, bounded):
    pytest.importorskip("distributed")
    err = _usage_error(["--out", str(tmp_path), "--scheduler", "ws://127.0.0.1:9"], capsys)
    assert "argument --scheduler: nothing accepts a connection at ws://127.0.0.1:9" in err


def test_a_dask_scheduler_answers_as_one():
    distributed = pytest.importorskip("distributed")
    from sparse_token_estimators.distributed import _scheduler_identity

    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as c:
        assert _scheduler_identity(c.scheduler_address, 10) == "Scheduler"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("name, message", [
    (".lock", "cannot use the lock file {out}/.lock: it is a FIFO (named pipe), not a regular "
              "file, which a run never makes; delete it"),
    ("records/config.json", "{out}/records/config.json (the configuration of the records) is "
                            "a FIFO (named pipe), not a regular file, which a run never "
                            "writes: it is not read"),
    ("manifest.json", "{out}/manifest.json (the list of the files of the earlier run) is a "
                      "FIFO (named pipe), not a regular file"),
])
def test_a_fifo_in_out_is_refused_naming_it_never_read(name, message, no_fit, tmp_path,
                                                        capsys, bounded):
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True)
    os.mkfifo(out / name)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    err = _usage_error(["--out", str(out)], capsys)
    assert f"argument --out: {message.format(out=out)}" in " ".join(err.split())
    # nothing changed but the lock file (the run's own, kept: see RunLock)
    after = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert [p for p in after if p.name != ".lock"] == [p for p in before if p.name != ".lock"]
    assert (out / name).is_fifo()


def test_two_runs_started_at_once_on_a_new_out_the_refused_one_leaves_the_others_lock(
        no_fit, tmp_path, capsys, monkeypatch):
    # both find --out missing (both "made" it); the first takes the lock between the
    # second's check of --out and its lock
    out = tmp_path / "new" / "out"
    check_out, first = cli._check_out, []

    def then_the_first_run_locks(parser, args):
        made = check_out(parser, args)
        first.append(_records.RunLock(out, "the first run").acquire())
        return made

    monkeypatch.setattr(cli, "_check_out", then_the_first_run_locks)
    err = _usage_error(["--out", str(out)], capsys)
    assert f"{out} is in use by another run (PID {os.getpid()}: the first run)" in err
    assert (out / ".lock").is_file()  # the first run's lock, and its folder, stay
    monkeypatch.setattr(cli, "_check_out", check_out)
    err = _usage_error(["--out", str(out)], capsys)  # a third run: refused too
    assert "is in use by another run" in err
    first[0].release()


def test_a_refused_run_that_made_out_and_took_its_lock_removes_both(no_fit, tmp_path,
                                                                     capsys, monkeypatch):
    out = tmp_path / "new" / "out"
    monkeypatch.setattr(_records, "foreign_files", lambda out: ["x"])
    err = _usage_error(["--out", str(out)], capsys)
    assert "holds 1 file(s) that no run wrote" in err
    assert list(tmp_path.iterdir()) == []


def test_a_lock_taken_on_a_removed_lock_file_is_taken_again_on_the_new_one(tmp_path):
    # a run that opened .lock just before its holder removed it locks the new file
    lock = _records.RunLock(tmp_path)
    real_flock, removed = None, []
    import fcntl

    real_flock = fcntl.flock

    def flock(fd, op):
        if not removed:  # the holder removes the file between our open and our flock
            removed.append(True)
            os.unlink(tmp_path / ".lock")
        return real_flock(fd, op)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fcntl, "flock", flock)
        lock.acquire()
    try:
        with pytest.raises(_records.OutLocked):  # the file now there is the one locked
            _records.RunLock(tmp_path).acquire()
    finally:
        lock.release()


def test_architecture_seeds_that_would_change_nothing_are_refused(no_fit, tmp_path, capsys):
    err = _usage_error(["--out", str(tmp_path / "a"), "--scale", "quick", "--seeds", "1",
                        "--architecture-seeds", "5"], capsys)
    assert ("argument --architecture-seeds: 5 is more than the run's 1 seed(s) (--seeds); "
            "pass --architecture-seeds 1 or fewer, or --seeds 5 or more") in err
    err = _usage_error(["--out", str(tmp_path / "b"), "--scale", "first",
                        "--architecture-seeds", "1"], capsys)
    assert ("argument --architecture-seeds: --scale first runs no architectures experiment "
            "(it runs width_separation, length_generalisation, alignment)") in err
    assert list(tmp_path.iterdir()) == []


def test_a_refused_run_leaves_no_folder_it_made(no_fit, tmp_path, capsys):
    out = tmp_path / "new" / "a" / "b" / "out"
    err = _usage_error(["--out", str(out), "--seq-len", "1", "--n-selected", "1"], capsys)
    assert "n_selected must be between 1 and seq_len - 1" in err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_other_files_is_refused(no_fit, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    err = _usage_error(["--out", str(tmp_path)], capsys)
    assert "holds 1 file(s) that no run wrote (notes.txt" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_another_configurations_records_are_refused(smoke_scale, tmp_path, capsys,
                                                    monkeypatch):
    _records.RecordStore(tmp_path, SMOKE)
    monkeypatch.setattr(_run, "dispatch", lambda *a, **k: pytest.fail("a fit ran"))
    err = _usage_error(["--out", str(tmp_path), "--seed", "3"], capsys)
    assert "another configuration (seed: saved 0, asked 3)" in err
    assert "another --out, or pass --fresh" in err
    err = _usage_error(["--out", str(tmp_path), "--n-samples", "48", "--seeds", "1"], capsys)
    assert "n_samples: saved 64, asked 48" in err and "n_seeds" not in err
    # n_jobs changes how the fits run, n_seeds how many run, not their numbers: resumable
    lock, store = cli._open_out(cli.build_parser(), cli.build_parser().parse_args(
        ["--out", str(tmp_path), "--n-jobs", "2", "--seeds", "1"]), SMOKE)
    lock.release()
    assert len(store) == 0


def test_records_round_trip_exactly(smoke_results, tmp_path):
    store = _records.RecordStore(tmp_path, SMOKE)
    fit, record = Fit("paper", 4, SMOKE.seq_len), {
        "test_r2": 0.1 + 0.2, "fit_cpu_s": math.nan, "big": -math.inf, "n": 3,
        "r2_by_length": {2: 0.5, 16: math.nan}, "trace": [{"step": 0, "alignment": 0.0}]}
    store.put(SMOKE, fit, 0, record)
    back = _records.RecordStore(tmp_path, SMOKE).get(SMOKE, fit, 0)
    assert repr(back) == repr(record)  # NaN included, int keys and types kept
    assert store.get(SMOKE, fit, 1) is None
    assert store.get(reproduce.with_sizes(SMOKE, n_samples=48), fit, 0) is None


def test_results_from_records_equal_fresh_ones(smoke_results, tmp_path):
    store = _records.RecordStore(tmp_path, SMOKE)
    first = reproduce.run(SMOKE, progress=False, store=store)
    assert len(store) == len(first["fits"]) and store.resumed == 0
    progress = reproduce.Progress(len(first["fits"]), enabled=False)
    again = reproduce.run(SMOKE, progress=progress, store=_records.RecordStore(tmp_path, SMOKE))
    assert progress.done == progress.resumed == len(first["fits"])
    assert _without_times(again) == _without_times(first) == _without_times(smoke_results)
    # every time, too: read back, not measured again
    assert [f["fit_s"] for f in again["fits"]] == [f["fit_s"] for f in first["fits"]]


def test_results_json_is_strict(tmp_path):
    import numpy as np

    results = {"fits": [{"fit_cpu_s": math.nan, "fit_s": np.float32(1.5)}],
               "sd": np.float32("nan"), "n": np.int64(3), "slope": math.inf,
               "curve": [1.0, -math.inf], "nested": {"r2": {"sd": math.nan}}}
    text = _records.dumps(results)
    saved = json.loads(text, parse_constant=_refuse_nan)
    assert saved["fits"][0]["fit_cpu_s"] is None
    assert "learning curve's fit records no CPU time" in saved["fits"][0]["fit_cpu_s_missing"]
    assert saved["slope"] is None and saved["slope_missing"].startswith("+Infinity")
    assert saved["curve"] == [1.0, None]
    assert saved["fits"][0]["fit_s"] == 1.5 and saved["n"] == 3 and saved["sd"] is None
    assert saved["nested"]["r2"] == {"sd": None, "sd_missing": "NaN: not defined for this row"}
    assert math.isnan(results["slope"] - math.inf)  # the results themselves are left as they were


def test_a_folder_holds_one_run(smoke_results, tmp_path):
    pytest.importorskip("matplotlib")
    written = reproduce.write_outputs(smoke_results, tmp_path)
    assert (tmp_path / "alignment.png").exists()
    json.loads((tmp_path / "results.json").read_text(), parse_constant=_refuse_nan)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["complete"] and written[-1].name == "manifest.json"
    assert sorted(manifest["files"]) == sorted(p.name for p in written[:-1])
    again = reproduce.write_outputs(smoke_results, tmp_path, plots=False)
    assert not list(tmp_path.glob("*.png"))  # no figure of the earlier run is left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in again)
    assert "![alignment]" not in (tmp_path / "summary.md").read_text()
    assert _records.foreign_files(tmp_path) == []


def test_fresh_discards_only_the_runs_files(tmp_path):
    (tmp_path / "results.json").write_text("{}")
    _records.write_atomic(tmp_path / "manifest.json", json.dumps({"files": ["results.json"]}))
    _records.RecordStore(tmp_path, SMOKE)
    (tmp_path / "records" / "mine.txt").write_text("x")
    _records.discard_run(tmp_path)
    assert list(tmp_path.iterdir()) == []


_SMOKE_CLI = (
    "import sys, torch; torch.set_num_threads(1);"
    "from sparse_token_estimators import __main__ as cli, reproduce;"
    "reproduce.SCALES['quick'] = reproduce.SCALES['first'] = reproduce.SMOKE;"
    "sys.exit(cli.main(sys.argv[1:]))"
)

# The same, held (blocked on its stdin) once ``HOLD_AFTER`` records are saved,
# after saying so on stdout: a test acts on the run at a known point, not after
# a time, and the run cannot end first.
_HELD_CLI = (
    "import os, sys, torch; torch.set_num_threads(1)\n"
    "from sparse_token_estimators import __main__ as cli, reproduce\n"
    "from sparse_token_estimators.reproduce import _records\n"
    "reproduce.SCALES['quick'] = reproduce.SCALES['first'] = reproduce.SMOKE\n"
    "put = _records.RecordStore.put\n"
    "def held(store, *args):\n"
    "    put(store, *args)\n"
    "    if len(store) == int(os.environ['HOLD_AFTER']):\n"
    "        print('held', flush=True)\n"
    "        sys.stdin.read()\n"
    "_records.RecordStore.put = held\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def _after_plan(err):
    """The lines of ``err`` after the plan the command line prints before the first fit."""
    return [line for line in err.splitlines()
            if not line.startswith(("plan: ", "  about ", "  the costliest", "  on more "))]


def _smoke_cli(out, *args, code=_SMOKE_CLI):
    return [sys.executable, "-c", code, "--out", str(out), "--no-plots", "--n-jobs", "1",
            *args]


def _env(**more):
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""), **more}


def _held_run(out, n_records, *args):
    """A smoke run of the command line, held once ``n_records`` records are saved."""
    proc = subprocess.Popen(_smoke_cli(out, "--no-progress", *args, code=_HELD_CLI),
                            env=_env(HOLD_AFTER=str(n_records)), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # returns when held, or at the end of a run that never was
    if line != "held\n":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the run ended before holding: {err[-2000:]}")
    return proc


def _children(pid):
    """``{pid: command line}`` of the processes whose parent is ``pid`` (Linux's /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline") as cmdline:
                    command = cmdline.read().replace("\0", " ")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            if parent == pid:
                found[int(entry)] = command
    return found


def test_a_killed_run_resumes_with_the_same_results(smoke_results, tmp_path):
    out = tmp_path / "run"
    records = out / "records"
    at_least = 8
    proc = _held_run(out, at_least)  # SIGKILL once 8 fits are saved, not after a time
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    saved = sum(p.name != "config.json" for p in records.glob("*.json"))
    assert saved == at_least < len(smoke_results["fits"])
    assert not (out / "results.json").exists()

    rerun = subprocess.run(_smoke_cli(out), env=_env(), cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "fits resumed from records" in rerun.stderr  # the progress display counts them
    resumed = int(rerun.stdout.split("resumed ")[1].split()[0])
    assert resumed == saved  # every record there is whole (written atomically)
    assert f"of {len(smoke_results['fits'])} fits from" in rerun.stdout
    results = json.loads((out / "results.json").read_text(), parse_constant=_refuse_nan)
    fresh = json.loads(_records.dumps(smoke_results))
    assert _without_times(results) == _without_times(fresh)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_fits"] == resumed and manifest["fitted"] == \
        len(smoke_results["fits"]) - resumed


@pytest.mark.skipif(not os.path.isdir("/proc/self") or not hasattr(os, "pidfd_open"),
                    reason="reads the processes in Linux's /proc")
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_prints_one_line_stops_the_workers_and_resumes(signum, code, tmp_path):
    out = tmp_path / "run"
    proc = _held_run(out, 2, "--n-jobs", "2")
    workers = {pid: os.pidfd_open(pid) for pid, command in _children(proc.pid).items()
               if "loky" in command and "resource_tracker" not in command}
    try:
        assert workers, "the run has no worker processes to stop"
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == code
        resume = (f"sparse-token-reproduce --out {out} --no-plots --n-jobs 1 --no-progress "
                  "--n-jobs 2")
        # the plan, printed before the first fit, then the one line of the interrupt
        assert err.startswith("plan: ")
        assert _after_plan(err) == [f"interrupted: 2 finished fits are kept in {out}/records; "
                                    f"the same command resumes: {resume}"]
        for pid, pidfd in workers.items():  # each worker has ended (readable: it exited)
            assert select.select([pidfd], [], [], 60)[0], f"worker {pid} still runs"
    finally:
        proc.kill()
        proc.wait()
        for pidfd in workers.values():
            os.close(pidfd)
    assert len(_records.RecordStore(out, SMOKE)) == 2  # kept, and whole


def test_run_resumes_from_a_folder(smoke_results, tmp_path):
    from dataclasses import replace

    config = replace(SMOKE, n_seeds=1)
    first = reproduce.run(config, progress=False, store=tmp_path)
    assert len(list((tmp_path / "records").glob("*-s0-*.json"))) == len(first["fits"])
    with pytest.raises(ValueError, match="seed: saved 0, asked 1"):
        reproduce.run(replace(config, seed=1), progress=False, store=tmp_path)


def test_run_fits_reads_back_what_its_store_holds(tmp_path, monkeypatch):
    from sparse_token_estimators.reproduce import _fits

    store = _records.RecordStore(tmp_path, SMOKE)
    fits = [Fit("fcn", 8, SMOKE.seq_len), Fit("fcn", 4, SMOKE.seq_len, "population")]
    first = _fits.run_fits(SMOKE, fits, reproduce.Progress(4, enabled=False), store)
    assert len(store) == len(first) == 2 * SMOKE.n_seeds
    monkeypatch.setattr(_fits, "fit_job", lambda *a: pytest.fail("fitted again"))
    progress = reproduce.Progress(4, enabled=False)
    again = _fits.run_fits(SMOKE, fits, progress, store)
    assert repr(again) == repr(first) and progress.resumed == 4


def test_a_run_stopped_at_any_fit_keeps_every_finished_one_and_resumes(
        smoke_results, smoke_scale, tmp_path, monkeypatch, capsys):
    # The k-th job (a group of fits) raises as a Ctrl-C would, inside a search's
    # round: every fit of the jobs finished before it is in the records, and the
    # same command resumes from them to the results of an uninterrupted run.
    from sparse_token_estimators.reproduce import _fits
    from sparse_token_estimators.reproduce._run import planned_fits

    out, job, calls = tmp_path / "run", _fits.group_job, []
    planned = {_fits.group_key(f) for f in planned_fits(SMOKE)}
    stop_at = len(planned) + 2  # in the first search round

    def group_job(config, members):
        calls.append([(fit, seed) for fit, seed, _ in members])
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return job(config, members)

    monkeypatch.setattr(_fits, "group_job", group_job)
    with pytest.raises(KeyboardInterrupt):
        reproduce.run(SMOKE, progress=False, store=out)
    saved = _records.RecordStore(out, SMOKE)
    finished = [member for members in calls[:-1] for member in members]
    assert len(saved) == len(finished)  # every finished fit, the searches' included
    assert all(saved.get(SMOKE, fit, seed) is not None for fit, seed in finished)
    assert not (out / "results.json").exists()

    monkeypatch.setattr(_fits, "group_job", job)
    assert cli.main(["--out", str(out), "--no-plots"]) == 0
    captured = capsys.readouterr()
    assert "fits resumed from records" in captured.err  # the progress display counts them
    n_fits = len(smoke_results["fits"])
    assert f"resumed {len(finished)} of {n_fits} fits from" in captured.out
    results = json.loads((out / "results.json").read_text(), parse_constant=_refuse_nan)
    assert _without_times(results) == _without_times(json.loads(_records.dumps(smoke_results)))
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["resumed_fits"], manifest["fitted"]) == (len(finished),
                                                              n_fits - len(finished))


def test_an_unwritable_out_is_refused_before_torch_is_imported(tmp_path):
    # The folder is checked first, before the package imports torch, scikit-learn
    # and skorch (seconds on a small machine): a fresh process answers at once.
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['sparse-token-reproduce', '--out', {str(blocker / 'out')!r}]\n"
        "try:\n"
        "    runpy.run_module('sparse_token_estimators', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'torch' in sys.modules, 'sklearn' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout.split() == ["exit", "2", "False", "False"], done.stderr
    assert "argument --out: cannot write into" in done.stderr


def test_the_package_loads_its_names_and_submodules_on_first_use():
    code = ("import sys, sparse_token_estimators as ste\n"
            "print('torch' in sys.modules)\n"
            "print(ste.SparseTokenFCN.__module__, ste.theory.__name__, 'torch' in sys.modules)\n"
            "print(sorted(set(ste.__all__) - set(dir(ste))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.stdout.splitlines() == [
        "False", "sparse_token_estimators.estimators.fcn sparse_token_estimators.theory True", "[]",
    ], done.stderr


def test_plan_prints_the_fits_and_times_and_fits_nothing(smoke_scale, tmp_path, capsys,
                                                         monkeypatch):
    monkeypatch.setattr(_run, "dispatch", lambda *a, **k: pytest.fail("a fit ran"))
    out = tmp_path / "never"
    assert cli.main(["--plan", "--out", str(out), "--n-jobs", "2"]) == 0
    printed = capsys.readouterr().out
    assert "fits planned + about" in printed and "wall on 2 workers" in printed
    assert not out.exists()  # nothing written


def test_experiments_runs_a_subset_whose_records_the_whole_run_shares(smoke_scale, tmp_path,
                                                                      capsys):
    assert cli.main(["--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--experiments", "width_separation"]) == 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["config"]["experiments"] == ["width_separation"]
    assert [c["claim"] for c in saved["claims"]] == ["width separation"]
    out = capsys.readouterr().out
    assert "--scale architectures-paper" in out  # the other runs' commands, with times
    assert cli.main(["--out", str(tmp_path), "--no-plots", "--no-progress",
                     "--experiments", "width_separation", "alignment"]) == 0
    assert "resumed" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--experiments", "nothing", "--out", str(tmp_path)])


def test_the_scales_name_every_experiment_once():
    from sparse_token_estimators.reproduce._config import ALL_EXPERIMENTS, CLAIM_EXPERIMENTS
    from sparse_token_estimators.reproduce._registry import EXPERIMENTS

    assert ALL_EXPERIMENTS == tuple(e.name for e in EXPERIMENTS)
    assert reproduce.SCALES["paper"].experiments == CLAIM_EXPERIMENTS
    assert reproduce.SCALES["architectures-paper"].experiments == ("architectures",)
    # the two halves of the paper scale are one configuration: one folder, one set of records
    assert _records.config_identity(reproduce.SCALES["paper"]) == \
        _records.config_identity(reproduce.SCALES["architectures-paper"]) == \
        _records.config_identity(reproduce.PAPER)
    assert not reproduce.SCALES["quick"].judge_architectures


def test_verdict_7_is_not_judged_on_the_quick_slice(smoke_results):
    from dataclasses import asdict, replace

    from sparse_token_estimators.reproduce._verdicts import NOT_JUDGED, assess_claims

    results = {**smoke_results,
               "config": asdict(replace(SMOKE, judge_architectures=False))}
    claim = next(c for c in assess_claims(results) if c["claim"] == "query-layout separation")
    assert claim["verdict"] == NOT_JUDGED and "architectures-paper" in claim["note"]
    assert claim["evidence"].startswith("indicative only")
    # the summary says it was not judged, with no count of seeds supporting it
    from sparse_token_estimators.reproduce._report import summary_markdown

    md = summary_markdown({**results, "claims": assess_claims(results)})
    row = next(line for line in md.splitlines()
               if line.startswith("| query-layout separation"))
    assert row.endswith("| not judged |") and "0 of 1" not in row
    assert "- **query-layout separation: not judged by this run" in md
