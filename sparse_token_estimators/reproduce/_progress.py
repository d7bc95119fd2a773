"""The progress display of a run: one step per finished fit, with time left."""

import sys
import time


def _clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else \
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Fits done out of the total, time elapsed and time left by the cost model
    (``Fit.cost``), as a tqdm bar on stderr or one line per fit.

    The time left is the run's plan (``expect``: the fits it expects, the searches' too,
    their cost and the wall time) from the first second, weighed more and more, as fits
    finish, against the pace measured (elapsed x cost left / cost done); without a plan,
    the pace alone, after the first fit.

    Parameters
    ----------
    total : int
        Fits in the run.
    enabled : bool, default=True
        False: count silently (``done`` still counts).
    clock : callable, default=time.perf_counter
        Seconds, for the times shown (a test passes its own).

    Attributes
    ----------
    done : int
        Fits finished, those read back from records included.
    resumed : int
        Fits read back from a run's records (``resume``), not fitted.

    Examples
    --------
    >>> progress = Progress(total=3, enabled=False)  # enabled=True draws it
    >>> progress.plan(30.0)
    >>> progress.stage("width separation", n_fits=3, cost=30.0)
    >>> progress.advance(); progress.advance(2); progress.close()
    >>> progress.done
    3
    """

    def __init__(self, total, enabled=True, clock=time.perf_counter):
        self.total, self.done, self.resumed, self.enabled = total, 0, 0, enabled
        self._text, self._fit_cost, self._cost_done, self._cost_total = "", 0.0, 0.0, 0.0
        self._expected_cost, self._expected_wall, self._expected_fits = 0.0, 0.0, 0
        self._clock = clock
        self._start = clock()
        self._bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # without tqdm: one line per fit
                return
            self._bar = tqdm(total=total, unit="fit", file=sys.stderr, dynamic_ncols=True,
                             bar_format="{n_fmt}/{total_fmt} fits |{bar}| {desc}")

    def plan(self, cost):
        """Add ``cost`` to the estimated cost of the whole run."""
        self._cost_total += cost

    def expect(self, n_fits, cost, wall_s):
        """The plan: ``n_fits`` fits to make costing ``cost`` together (``Fit.cost``'s
        units, the searches' expected fits included), in ``wall_s`` seconds.

        Examples
        --------
        >>> clock = iter([0.0, 60.0]).__next__
        >>> progress = Progress(10, enabled=False, clock=clock)
        >>> progress.expect(10, cost=100.0, wall_s=600.0)
        >>> round(progress.remaining())  # nothing done yet: the plan's 600 s less 60
        540
        """
        self._expected_fits, self._expected_cost, self._expected_wall = n_fits, cost, wall_s

    def add(self, n_fits):
        """Count ``n_fits`` more fits in the run (a search's, decided as it goes)."""
        self.total += n_fits
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def stage(self, text, *, n_fits, cost):
        """Start a stage of ``n_fits`` fits that together cost about ``cost``."""
        self._text, self._fit_cost = text, cost / max(n_fits, 1)
        self._show(f"{text}: {n_fits} fits")

    def resume(self, n, cost, text):
        """Count ``n`` fits read back from records (costing ``cost``) as done, outside the
        estimate of time left."""
        self.done += n
        self.resumed += n
        self._cost_total = max(self._cost_total - cost, 0.0)
        self._text = f"{text}: {n} fits resumed from records"
        if self._bar is not None:
            self._bar.update(n)
        self._show(self._text)

    def elapsed(self):
        return self._clock() - self._start

    def remaining(self):
        """Estimated seconds left (without a plan, None before the first fit finishes)."""
        total = max(self._cost_total, self._expected_cost)
        left = max(total - self._cost_done, 0.0)
        paced = self.elapsed() * left / self._cost_done if self._cost_done > 0 else None
        if self._expected_cost <= 0:
            return paced
        if paced is None:
            return max(self._expected_wall - self.elapsed(), 0.0)
        planned = self._expected_wall * left / total
        weight = min(1.0, self._cost_done / (0.25 * total))
        return (1 - weight) * planned + weight * paced

    def _times(self):
        left = self.remaining()
        expected = f"~{self._expected_fits} fits expected, " \
            if self._expected_fits > self.total else ""
        return f"{expected}{_clock(self.elapsed())} elapsed, " + (
            "time left: after the first fit" if left is None else f"~{_clock(left)} left")

    def advance(self, n=1, cost=None):
        """Count ``n`` finished fits, of estimated ``cost`` together (None: the
        stage's mean cost per fit)."""
        self.done += n
        self._cost_done += n * self._fit_cost if cost is None else cost
        if self._bar is not None:
            self._bar.update(n)
        self._show(self._text)

    def _show(self, text):
        if self._bar is not None:
            self._bar.set_description_str(f"{self._text}: {self._times()}", refresh=True)
        elif self.enabled:
            print(f"[{self.done:>3}/{self.total}] {text}: {self._times()}", file=sys.stderr,
                  flush=True)

    def close(self):
        if self._bar is not None:
            self._bar.close()
