"""The progress display of a run: one step per finished fit, with time left.

Fits run inside ``GridSearchCV``, in this process, in worker processes or on
Dask. joblib, which runs them all, calls ``Parallel.print_progress`` in this
process after every finished task, whatever the backend (sequential, loky,
Dask); :func:`count_finished_tasks` hooks that call for the duration of a
``with`` block, so the display moves as each fit finishes rather than when a
whole search returns.
"""

import sys
import threading
import time
from contextlib import contextmanager

import joblib


@contextmanager
def count_finished_tasks(on_finished):
    """Call ``on_finished(n)`` each time joblib tasks finish, inside the block.

    Wraps ``joblib.Parallel.print_progress`` (scikit-learn's ``Parallel``
    inherits it), which joblib calls in the calling process after each
    finished task or batch of tasks, for every backend; ``n`` is the number
    of tasks finished since the last call for that ``Parallel`` run. Every
    ``Parallel`` run in this process is counted while the block is open, in
    any thread. joblib groups very short tasks (well under a second) into
    batches, which are then counted together.

    Parameters
    ----------
    on_finished : callable
        Called with an int >= 1, from whichever thread joblib reports in.

    Examples
    --------
    >>> from sklearn.utils.parallel import Parallel, delayed
    >>> counts = []
    >>> with count_finished_tasks(counts.append):
    ...     squares = Parallel(n_jobs=1)(delayed(pow)(i, 2) for i in range(3))
    >>> counts
    [1, 1, 1]
    """
    original = joblib.Parallel.print_progress
    lock = threading.Lock()

    def print_progress(parallel):
        with lock:
            # n_completed_tasks restarts at 0 for every call of the Parallel
            # object; _call_id tells the calls apart.
            call, done = getattr(parallel, "_call_id", None), parallel.n_completed_tasks
            seen_call, seen = getattr(parallel, "_finished_counted", (None, 0))
            new = done - (seen if seen_call == call else 0)
            parallel._finished_counted = (call, done)
        if new > 0:
            on_finished(new)
        return original(parallel)

    joblib.Parallel.print_progress = print_progress
    try:
        yield
    finally:
        joblib.Parallel.print_progress = original


def _clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else \
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Fits done out of the total, time elapsed and an estimate of time left.

    A tqdm bar on stderr when tqdm is installed, else one line per finished
    fit. The estimate weighs each fit by an estimated cost (from its size,
    epochs and model; the stage says how much its fits cost together), so a
    stage of cheap fits does not make the remaining expensive ones look fast:
    time left = elapsed x cost left / cost done. The times are refreshed
    every ``refresh`` seconds while a long fit runs (the bar), or a line is
    printed after a minute without one (plain lines), so a slow run is not
    taken for a hung one.

    Parameters
    ----------
    total : int
        Fits in the run.
    enabled : bool, default=True
        False: count silently (``done`` still counts).
    refresh : float, default=1.0
        Seconds between refreshes of the times while no fit finishes.

    Attributes
    ----------
    done : int
        Fits finished, those read back from records included.
    resumed : int
        Fits read back from a run's records (``resume``), not fitted.

    Examples
    --------
    >>> progress = Progress(total=3, enabled=False)  # enabled=True draws it
    >>> progress.stage("width separation", n_fits=3, cost=30.0)
    >>> progress.advance(); progress.advance(2); progress.close()
    >>> progress.done
    3
    """

    def __init__(self, total, enabled=True, refresh=1.0):
        self.total, self.done, self.resumed, self.enabled = total, 0, 0, enabled
        self._text, self._fit_cost, self._cost_done, self._cost_total = "", 0.0, 0.0, 0.0
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(
                    total=total, unit="fit", file=sys.stderr, dynamic_ncols=True,
                    bar_format="{n_fmt}/{total_fmt} fits |{bar}| {desc}",
                )
        self._last_line = time.perf_counter()
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._tick, args=(refresh,), daemon=True).start()

    def _tick(self, refresh):
        while not self._stop.wait(refresh):
            with self._lock:
                if self._bar is not None:
                    self._show()
                elif time.perf_counter() - self._last_line > 60:
                    self._line(f"{self._text}: still fitting")

    def plan(self, cost):
        """Add ``cost`` to the estimated cost of the whole run."""
        self._cost_total += cost

    def add(self, n_fits):
        """Count ``n_fits`` more fits in the run (a search's, decided as it goes)."""
        with self._lock:
            self.total += n_fits
            if self._bar is not None:
                self._bar.total = self.total
                self._bar.refresh()

    def stage(self, text, *, n_fits, cost):
        """Start a stage of ``n_fits`` fits that together cost about ``cost``."""
        with self._lock:
            self._text, self._fit_cost = text, cost / max(n_fits, 1)
            if self._bar is not None:
                self._show()
            elif self.enabled:
                self._line(f"{text}: {n_fits} fits")

    def resume(self, n, cost, text):
        """Count ``n`` fits read back from a run's records (costing ``cost`` to fit) as done.

        They count in ``done`` but not in the estimate of time left, which
        weighs only what this run fits.
        """
        with self._lock:
            self.done += n
            self.resumed += n
            self._cost_total = max(self._cost_total - cost, 0.0)
            self._text = f"{text}: {n} fits resumed from records"
            if self._bar is not None:
                self._bar.update(n)
                self._show()
            elif self.enabled:
                self._line(self._text)

    def elapsed(self):
        return time.perf_counter() - self._start

    def remaining(self):
        """Estimated seconds left (None before the first fit has finished)."""
        if self._cost_done <= 0:
            return None
        left = max(self._cost_total - self._cost_done, 0.0)
        return self.elapsed() * left / self._cost_done

    def _times(self):
        left = self.remaining()
        return f"{_clock(self.elapsed())} elapsed, " + (
            "time left: after the first fit" if left is None else f"~{_clock(left)} left")

    def advance(self, n=1):
        """Count ``n`` finished fits (thread-safe: joblib may call from a thread)."""
        with self._lock:
            self.done += n
            self._cost_done += n * self._fit_cost
            if self._bar is not None:
                self._bar.update(n)
                self._show()
            elif self.enabled:
                self._line(self._text)

    def _show(self):
        self._bar.set_description_str(f"{self._text}: {self._times()}", refresh=True)

    def _line(self, text):
        print(f"[{self.done:>3}/{self.total}] {text}: {self._times()}", file=sys.stderr,
              flush=True)
        self._last_line = time.perf_counter()

    def close(self):
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
