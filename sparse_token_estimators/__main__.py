"""Command line: ``python -m sparse_token_estimators`` or ``sparse-token-reproduce``.

Runs the reproduction (``reproduce.run``) and writes the results file, the
tables, the figures and a Markdown summary into ``--out``. Everything is
checked before the first fit (the arguments, the output folder, the
scheduler); each finished fit is saved in ``--out``/records, so the same
command run again continues where a killed run stopped. One run at a time
holds ``--out`` (a lock, naming its process).

Ctrl-C (SIGINT) or SIGTERM stops the run and its workers and prints one
line: how many fits are kept and the command that resumes; the exit status
is 130 after SIGINT, 143 after SIGTERM (128 + the signal's number, as a
shell reports a process killed by it). A file of ``--out`` that cannot be
trusted or written is one message and exit status 2, never a traceback.
"""

import argparse
import contextlib
import gc
import os
import shlex
import signal
import socket
import sys
import traceback
import warnings
from pathlib import Path

# Only what parsing and checking the output folder need: torch, scikit-learn
# and skorch are imported after those checks (the package imports them lazily).
from . import reproduce
from ._addresses import check_distributed as _check_distributed
from ._addresses import speaks_tls as _speaks_tls
from ._trainers import TRAINERS
from .reproduce import _records
from .reproduce._config import ALL_EXPERIMENTS, MAX_SEED, RUN_TIMES

#: the options the configuration's fields come from, for the messages
FLAGS = {"seq_len": "--seq-len", "token_dim": "--token-dim", "n_selected": "--n-selected",
         "n_samples": "--n-samples", "seeds": "--seeds", "seed": "--seed",
         "architecture_n_seeds": "--architecture-seeds",
         "n_jobs": "--n-jobs", "device": "--device", "trainer": "--trainer"}

#: every run, in the order the closing lines and --help give them: what it is
RUNS = (("first", "the paper's three claims alone at T = 10 (verdicts 1-3; what make run "
                  "runs)"),
        ("quick", "every experiment at small sizes (verdicts 1-6; the architectures as an "
                  "indicative slice)"),
        ("paper", "the paper's claims and the extensions at the paper's sizes (verdicts 1-6)"),
        ("architectures-paper", "the architectures comparison at the paper's sizes "
                                "(verdict 7; scales with the workers, --scheduler)"))

#: seconds to wait for a scheduler to accept a connection
SCHEDULER_TIMEOUT = 2.0


def _count(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}; "
                                             f"got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}; got {value}")
        return value
    parse.__name__ = "integer"
    return parse


def _seed(text):
    value = _count(0)(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"seeds are 0 to 2**32 - 1 = {MAX_SEED} (scikit-learn's random_state); "
            f"got {value}")
    return value


def _n_jobs(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-zero integer; got {text!r}") from None
    if value == 0:
        raise argparse.ArgumentTypeError(
            "0 fits in parallel has no meaning: use -1 (all cores) or n >= 1")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="sparse-token-reproduce",
        description=(
            "Reproduce 'Transformers Provably Learn Sparse Token Selection While "
            "Fully-Connected Nets Cannot' (Wang, Wei, Hsu & Lee, ICML 2024): width "
            "separation, length generalisation, alignment and width scaling, judged "
            "on the paper's one-draw model over several seeds, with the package's "
            "ensemble of positional draws beside it; and, beyond the paper, training "
            "on the population against a fixed sample, sample complexity, and five "
            "positional encodings compared."
        ),
    )
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_const", dest="scale", const="quick",
                       help="the same as --scale quick")
    scale.add_argument("--scale", choices=[name for name, _ in RUNS],
                       help="which run (default: first); times on 2 CPU cores (quick over 2 seeds, "
                            "the others 3): "
                            + "; ".join(f"'{name}': {what}, {RUN_TIMES[name]}"
                                        for name, what in RUNS)
                            + ". --plan prints a run's fits and time on this machine")
    parser.set_defaults(scale="first")
    parser.add_argument("--plan", action="store_true",
                        help="print the run's plan (the fits it knows of, the searches' "
                             "expected ones, the CPU time and the wall time on the workers "
                             "it has, by the cost model) and fit nothing")
    parser.add_argument("--experiments", nargs="+", choices=ALL_EXPERIMENTS, metavar="NAME",
                        default=None,
                        help="run these experiments only (default: the scale's); a subset "
                             "shares its records with the whole run in the same --out. "
                             "Names: " + ", ".join(ALL_EXPERIMENTS))
    parser.add_argument(
        "--out", default="results",
        help="output folder (default: results); it holds one run: each finished fit is "
             "saved in OUT/records as it finishes, and the same command run again resumes "
             "from there by default, fitting only what is missing (a folder holding another "
             "configuration's records is refused; --seeds, --architecture-seeds and "
             "--n-jobs are not part of it: a run with more seeds reuses the seeds it "
             "shares); the outputs of an earlier run there "
             "that this one does not write (e.g. its figures under --no-plots) are "
             "removed; manifest.json, written last, lists the files of the run; a folder "
             "holding files that no run wrote is refused, and so is one that another run "
             "holds (OUT/.lock names its process); a damaged or foreign record, manifest or "
             "OUT/records/config.json is refused naming the file, never used")
    parser.add_argument("--fresh", action="store_true",
                        help="discard the records and the files of an earlier run in --out "
                             "(only those its manifest lists) and start from zero")
    parser.add_argument("--device", default=None,
                        help="'auto' (GPU when present, the default), 'cpu' or 'cuda'")
    parser.add_argument("--seed", type=_seed, default=None,
                        help="first seed of data and models, 0 to 2**32 - 1 (default 0)")
    parser.add_argument("--seeds", type=_count(1), default=None, dest="n_seeds",
                        help="number of seeds, each its own data and models "
                             "(default 3); every number is a mean and spread over them")
    parser.add_argument("--architecture-seeds", type=_count(1), default=None,
                        dest="architecture_n_seeds", metavar="N",
                        help="the architectures experiment (verdict 7), the costliest, on the "
                             "first N of the seeds only (default: 1 at --scale quick, every "
                             "seed otherwise); the summary says so")
    sizes = parser.add_argument_group("task sizes (defaults depend on --scale)")
    sizes.add_argument("--seq-len", type=_count(1), help="sequence length T")
    sizes.add_argument("--token-dim", type=_count(1), help="token dimension d")
    sizes.add_argument("--n-selected", type=_count(1), help="number q of selected tokens")
    sizes.add_argument("--n-samples", type=_count(1), help="training sequences")
    parser.add_argument("--n-jobs", type=_n_jobs, default=None,
                        help="parallel fits in the searches (default -1: all cores)")
    parser.add_argument("--trainer", default=None, metavar="{" + ",".join(TRAINERS) + "}",
                        help="how the fits of a group (one model and width, every rate and "
                             "seed) train: 'exact' (the default), each its lone fit, one after "
                             "another; 'fused', the paper's model's fits side by side as one "
                             "stacked model (1.1-1.2x on a 2-core CPU; records equal to "
                             "lone fits to float "
                             "rounding, marked \"trainer\": \"fused\" and kept apart from "
                             "exact ones)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run the searches on a Dask cluster at ADDRESS, e.g. "
                             "tcp://host:8786 (needs the 'distributed' extra; refused if "
                             f"it does not accept a connection within {SCHEDULER_TIMEOUT:g} s)")
    parser.add_argument("--no-plots", action="store_true",
                        help="write tables and summary only (no matplotlib needed)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress display")
    return parser


def _check_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(
            "The figures need matplotlib: from the package's clone, "
            "pip install -e '.[plots]' (or pass --no-plots)."
        ) from None


@contextlib.contextmanager
def _dask_backend(address):
    """Send joblib's work (the searches' fits) to the Dask cluster at ``address``."""
    from .distributed import dask_backend

    with dask_backend(address) as client:
        print(f"running the searches on {client}", file=sys.stderr)
        yield client


def _check_scheduler(parser, address):
    """Refuse a TCP scheduler address that accepts no connection within the timeout, or
    whose peer does not answer as a Dask scheduler within it."""
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp", "tls", "ws", "wss"):
        return  # inproc://, ucx://, ...: distributed's own connect says what is wrong
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        parser.error(f"argument --scheduler: {address!r} is not an address such as "
                     "tcp://host:8786")
    try:
        socket.create_connection((host.strip("[]"), int(port)),
                                 timeout=SCHEDULER_TIMEOUT).close()
    except OSError as exc:
        parser.error(f"argument --scheduler: nothing accepts a connection at {address} "
                     f"within {SCHEDULER_TIMEOUT:g} s ({exc.strerror or exc}); start the "
                     "scheduler (`dask scheduler`) or leave --scheduler out to fit here")
    if scheme in ("tls", "wss"):
        # the whole handshake needs the cluster's certificates (the client's to make);
        # whether the peer speaks TLS at all is seen without them
        if not _speaks_tls(host.strip("[]"), int(port), SCHEDULER_TIMEOUT):
            parser.error(f"argument --scheduler: {address} accepts a connection but does "
                         f"not answer a TLS handshake within {SCHEDULER_TIMEOUT:g} s (a plain "
                         f"TCP port?); check the host and the port, or use "
                         f"tcp://{rest} if the scheduler does not use TLS")
        return
    if scheme == "ws":
        return  # a websocket's upgrade: distributed's connect, bounded by the client's timeout
    from .distributed import _scheduler_identity

    kind = _scheduler_identity(address, SCHEDULER_TIMEOUT)
    if kind != "Scheduler":
        what = (f"a Dask {kind.lower()}, not the scheduler" if kind else
                f"not a Dask scheduler (no answer to Dask's identity request within "
                f"{SCHEDULER_TIMEOUT:g} s)")
        parser.error(f"argument --scheduler: {address} accepts a connection but is {what}; "
                     "check the host and the port (a scheduler listens on 8786 unless told "
                     "otherwise: `dask scheduler` prints its address)")


def _build_config(parser, args):
    from ._device import resolve_device
    from ._layout import check_int
    from .datasets import make_sparse_selection

    try:  # refuse bad sizes or devices now, not in a worker minutes later
        config = reproduce.with_sizes(
            reproduce.SCALES[args.scale], seq_len=args.seq_len, token_dim=args.token_dim,
            n_selected=args.n_selected, n_samples=args.n_samples, seed=args.seed,
            n_seeds=args.n_seeds, architecture_n_seeds=args.architecture_n_seeds,
            device=args.device, n_jobs=args.n_jobs, trainer=args.trainer,
            experiments=tuple(args.experiments) if args.experiments else None,
        )
        check_int(config.n_samples, "n_samples")
        check_int(config.n_seeds, "seeds")
        make_sparse_selection(1, config.seq_len, config.token_dim, config.n_selected)
        resolve_device(config.device)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        named = [flag for name, flag in FLAGS.items()
                 if message.startswith(name + " ") or f"{name}=" in message]
        parser.error(f"{'/'.join(named) or 'arguments'}: {message}")
    _check_architecture_seeds(parser, args, config)
    return config


def _check_architecture_seeds(parser, args, config):
    """``--architecture-seeds N`` is refused where it would change nothing: a scale
    without the architectures experiment, or more seeds than the run has."""
    k = args.architecture_n_seeds
    if k is None:
        return
    if config.experiments is not None and "architectures" not in config.experiments:
        parser.error(f"argument --architecture-seeds: --scale {args.scale} runs no "
                     f"architectures experiment (it runs {', '.join(config.experiments)}); "
                     "leave --architecture-seeds out, or choose --scale quick or paper")
    if k > config.n_seeds:
        parser.error(f"argument --architecture-seeds: {k} is more than the run's "
                     f"{config.n_seeds} seed(s) (--seeds); pass --architecture-seeds "
                     f"{config.n_seeds} or fewer, or --seeds {k} or more")


def _missing_folders(out):
    """``out`` and those of its parents that do not exist yet, the deepest first."""
    missing = []
    for folder in (out, *out.parents):
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    return missing


def _remove_folders(folders):
    """Remove ``folders`` (the deepest first), each only while empty. A lock file there is
    never removed here: a refused run removes its own while it holds it (``_open_out``);
    one it does not hold is another run's, whose folder stays."""
    with contextlib.suppress(OSError):
        for folder in folders:
            folder.rmdir()


def _check_out(parser, args):
    """Create ``--out`` and prove it writable: first of all the checks, so that a
    folder that cannot be written fails before anything else is imported.
    Returns the folders made here (``--out`` and its new parents, the deepest first),
    which a refused run removes."""
    out = Path(args.out).absolute()
    made = _missing_folders(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        # named as the atomic writer's temporary files, so that a probe a kill
        # left behind is removed at the next start like theirs; whatever has the
        # name is removed first (opening a FIFO there would block)
        probe = out / f".probe.{os.getpid() & 0xFFFFFFFF:08x}.tmp"
        probe.unlink(missing_ok=True)
        probe.write_text("a probe of --out, removed at once")
        probe.unlink(missing_ok=True)
    except OSError as exc:
        _remove_folders([folder for folder in made if folder.is_dir()])
        parser.error(f"argument --out: cannot write into {args.out!r}: "
                     f"{exc.strerror or exc}; choose a folder you can write to")
    return made


def _open_out(parser, args, config, command=None, made=()):
    """Lock ``--out`` and open its records (before any fit), refusing another run's
    folder or a file there that cannot be trusted. Returns ``(lock, store)``.
    Refused, it releases the lock, first removing the lock file if it holds it and
    made ``--out`` (``made``, from ``_check_out``)."""
    out = Path(args.out)
    lock = _records.RunLock(out, command)
    try:
        lock.acquire()  # before --fresh: never discard the records of a running run
        if args.fresh:
            _records.discard_run(out)
        foreign = _records.foreign_files(out)
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            parser.error(f"argument --out: {args.out!r} holds {len(foreign)} file(s) that no "
                         f"run wrote ({shown}: not in its manifest.json); a run's folder holds "
                         "one run: choose a new or empty folder, or move them")
        return lock, _records.RecordStore(out, config)
    except (_records.StoreError, _records.OutNotWritable) as exc:
        lock.release(remove=bool(made))
        parser.error(f"argument --out: {exc.strerror if isinstance(exc, OSError) else exc}")
    except BaseException:
        lock.release(remove=bool(made))
        raise


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised in the main thread.

    Not a ``KeyboardInterrupt``: skorch ends a training early, as if it
    were complete, on a ``KeyboardInterrupt``, and that fit's record would
    be kept. joblib stops its workers on any ``BaseException``.
    """

    def __init__(self, signum):
        super().__init__(signum)
        self.exit_code = 128 + signum


def _on_signal(signum, frame):
    # a second Ctrl-C while the workers are being stopped is not another traceback
    for name in ("SIGINT", "SIGTERM"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def _interrupts():
    """SIGINT and SIGTERM raise ``Interrupted`` inside the block (in the main thread)."""
    previous = {}
    try:
        for name in ("SIGINT", "SIGTERM"):
            number = getattr(signal, name, None)
            if number is not None:
                previous[number] = signal.signal(number, _on_signal)
    except ValueError:  # not the main thread: Ctrl-C stays a KeyboardInterrupt
        pass
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _settle(exc):
    """Let go of what the unwound frames of ``exc`` held, now (a joblib generator
    left mid-way is closed, quietly: joblib warns of the tasks it cancels, which
    the line printed after says), and stop the workers (``_stop_workers``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traceback.clear_frames(exc.__traceback__)
        gc.collect()
    _stop_workers()


def _stop_workers():
    """Kill the workers of joblib's process pool (loky's reusable executor), if any.

    joblib stops them itself when the interrupt reaches it inside a
    ``Parallel`` call; an interrupt between two results (the loop storing a
    record, say) leaves the ``Parallel`` generator suspended and its workers
    computing, and at exit loky would wait for their tasks. There is no
    public handle on that pool: loky keeps it in ``reusable_executor._executor``.
    """
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(loky, "_executor", None)
    if executor is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            executor.shutdown(wait=True, kill_workers=True)


def _command(argv):
    """The command line as the user typed it: ``python -m ...`` or the entry point."""
    program = sys.argv[0] if sys.argv else ""
    as_module = program.endswith(".py") and os.path.samefile(program, __file__) \
        if os.path.exists(program) else False
    head = ["python", "-m", "sparse_token_estimators"] if as_module else \
        ["sparse-token-reproduce"]
    return [*head, *argv]


def _resume_command(argv):
    """The command that resumes: the same one, without ``--fresh`` (which would discard)."""
    kept = [a for a in argv if not (a.startswith("--fr") and "--fresh".startswith(a))]
    return shlex.join(_command(kept))


def _error(message):
    print(f"sparse-token-reproduce: error: {message}", file=sys.stderr)
    return 2


def main(argv=None):
    """Entry point of ``python -m sparse_token_estimators``; returns the exit code.

    Every argument, the output folder (created, written to, locked) and a
    given scheduler (a connection) are checked before the first fit: a bad
    one is a usage error (exit status 2) naming it. Ctrl-C or SIGTERM prints
    one line (the fits kept, the command that resumes) and returns 130 or
    143; a file of ``--out`` that cannot be trusted or written, one line and 2.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plan:  # nothing is written, nothing fitted
        config = _build_config(parser, args)
        if args.scheduler:
            _check_distributed()
            _check_scheduler(parser, args.scheduler)
        return _print_plan(args, config)
    lock = store = None
    with _interrupts():
        try:
            made = _check_out(parser, args)
            try:
                config = _build_config(parser, args)
                if not args.no_plots:
                    _check_matplotlib()
                if args.scheduler:
                    _check_distributed()
                    _check_scheduler(parser, args.scheduler)
                lock, store = _open_out(parser, args, config, shlex.join(_command(argv)),
                                        made)
            except SystemExit:  # a refused run leaves no folder it made
                _remove_folders(made)
                raise
            return _run(args, argv, config, store)
        except (Interrupted, KeyboardInterrupt) as exc:
            _settle(exc)
            kept = len(store) if store is not None else 0
            print(f"interrupted: {kept} finished fit{'s are' if kept != 1 else ' is'} kept in "
                  f"{Path(args.out) / _records.RECORDS}; the same command resumes: "
                  f"{_resume_command(argv)}", file=sys.stderr)
            return getattr(exc, "exit_code", 128 + signal.SIGINT)
        except _records.StoreError as exc:  # a file found damaged mid-run
            _settle(exc)
            return _error(str(exc))
        except _records.OutNotWritable as exc:  # --out made read-only, or full, mid-run
            _settle(exc)
            kept = len(store) if store is not None else 0
            return _error(f"cannot write into {args.out}: {exc.strerror.rstrip('.')}. The "
                          f"{kept} finished "
                          f"fit(s) in {Path(args.out) / _records.RECORDS} are kept; make the "
                          f"folder writable and run the same command again: "
                          f"{_resume_command(argv)}")
        finally:
            if lock is not None:
                lock.release()


def _workers(args, config):
    """The workers the run has: the Dask cluster's threads, or ``effective_n_jobs``."""
    from joblib import effective_n_jobs

    if not args.scheduler:
        return effective_n_jobs(config.n_jobs)
    from distributed import Client

    with Client(args.scheduler, timeout=SCHEDULER_TIMEOUT * 5) as client:
        return max(1, sum(client.nthreads().values()))


def _plan_lines(config, workers, store=None):
    """The plan of the run on ``workers`` workers (and, for a run of hours, on more)."""
    from .reproduce._plan import clock_text, estimate, machine_factor

    factor = machine_factor()
    plan = estimate(config, workers, store=store, factor=factor)
    lines = plan.lines()
    if plan.wall_s > 3600:
        more = [estimate(config, n, store=store, factor=factor) for n in (16, 64)
                if n != workers]
        lines.append("  on more workers (--scheduler): " + ", ".join(
            f"{p.n_workers} workers {clock_text(p.wall_s)} (utilisation "
            f"{p.utilisation:.2f})" for p in more))
    return plan, lines


def _print_plan(args, config):
    """``--plan``: the run's plan on the workers it would have; fits nothing."""
    import torch

    torch.set_num_threads(1)
    _, lines = _plan_lines(config, _workers(args, config))
    print(f"--scale {args.scale}" + (f" --experiments {' '.join(args.experiments)}"
                                     if args.experiments else "") + ":")
    print("\n".join(lines))
    print("  (records already in --out are not counted here: the run's own plan, printed "
          "before its first fit, leaves them out)")
    return 0


def _next_runs(scale):
    """The closing lines: every other run's command and its time on 2 cores."""
    lines = ["the other runs (times on 2 CPU cores, quick over 2 seeds and the others 3; "
             "--plan prints a run's time on this machine):"]
    for name, what in RUNS:
        if name != scale:
            lines.append(f"  python -m sparse_token_estimators --scale {name} --out "
                         f"results-{name}\n      {what}; {RUN_TIMES[name]}")
    return lines


def _run(args, argv, config, store):
    """The run itself, once everything is checked; returns the exit code."""
    import torch
    from joblib import effective_n_jobs

    if args.scheduler or effective_n_jobs(config.n_jobs) > 1:
        # The fits run in workers (one torch thread each); this process only
        # predicts, and extra threads here would compete with the workers.
        torch.set_num_threads(1)
    backend = _dask_backend(args.scheduler) if args.scheduler else contextlib.nullcontext()
    with backend as client:
        executor = client.get_executor(pure=False) if client is not None else None
        workers = max(1, sum(client.nthreads().values())) if client is not None else \
            effective_n_jobs(config.n_jobs)
        plan, lines = _plan_lines(config, workers, store)
        print("\n".join(lines), file=sys.stderr, flush=True)  # beside the progress
        results = reproduce.run(config, progress=not args.no_progress, store=store,
                                executor=executor, plan=plan)
    n_fits = len(results["fits"])
    written = reproduce.write_outputs(
        results, args.out, plots=not args.no_plots,
        about={"command": _command(argv), "fits": n_fits, "resumed_fits": store.resumed,
               "fitted": n_fits - store.resumed})
    from .reproduce._verdicts import NOT_JUDGED

    for claim in results["claims"]:
        if claim["verdict"] == NOT_JUDGED:  # verdict 7 at quick: an indicative slice
            print(f"{claim['claim']}: not judged here ({claim['verdict']}; this run's slice is "
                  "indicative only)")
            continue
        verdict = claim["verdict"] if claim["verdict"] == "supported" else \
            claim["verdict"].upper()
        print(f"{claim['claim']}: {verdict} on the mean of {claim['n_seeds']} seeds "
              f"({claim['seeds_supporting']} of {claim['n_seeds']} on their own)")
    if store.resumed:
        print(f"resumed {store.resumed} of {n_fits} fits from {args.out}/records; "
              f"fitted {n_fits - store.resumed}")
    out = Path(args.out)
    figures = [Path(path).name for path in written if str(path).endswith(".png")]
    print(f"wrote {len(written)} files to {out}/ in {results['elapsed_s']:.0f} s "
          f"(planned: {plan.wall_s:.0f} s)")
    print(f"  the summary: {out / 'summary.md'}")
    if figures:
        print(f"  the figures: {out}/*.png ({', '.join(figures)})")
    print("\n".join(_next_runs(args.scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
