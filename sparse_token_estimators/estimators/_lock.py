"""One lock per estimator (``training_lock``): training writes, reads wait for a step.

``EstimatorLock`` is re-entrant for the thread that holds it. Training
(``fit``, ``partial_fit``) and loading hold it as writers; prediction,
scoring, pickling and saving hold it as readers (``reading``): they wait
while another thread trains, so they never see a half-updated module.

At an epoch's end, while a fit runs its ``on_epoch_end`` callbacks, the
training thread *pauses* the lock (``paused``): readers from other threads
may then go ahead, on the weights of the epoch's last step, and the fit goes
on only once they are done. A callback that
starts a thread which calls ``net.predict`` (or pickles or saves the net) and
joins it thus gets its answer instead of a deadlock. Writers of other threads
always wait for the training call to end (a training call from a thread that
a callback joins would wait for ever: train in the callback's own thread),
and so do reads mid-epoch (an ``on_batch_end`` callback's thread included).
"""

import threading
import weakref
from contextlib import contextmanager


class EstimatorLock:
    """A re-entrant writers' lock whose holder can let readers in between two steps."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._owner = None  # the thread that holds it as a writer
        self._depth = 0  # its re-entries
        self._paused = 0  # > 0: the owner waits in a callback, readers may go ahead
        self._readers = 0  # readers of other threads going ahead during a pause

    # -- writers: fit, partial_fit, load_params -------------------------------------

    def acquire(self):
        me = threading.get_ident()
        with self._cond:
            while self._owner not in (None, me) or (self._owner is None and self._readers):
                self._cond.wait()
            self._owner, self._depth = me, self._depth + 1

    def release(self):
        with self._cond:
            self._depth -= 1
            if not self._depth:
                self._owner = None
                self._cond.notify_all()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    # -- readers: predict, score, pickling, saving ----------------------------------

    @contextmanager
    def reading(self):
        """Hold the lock to read the estimator: as a writer would (waiting for
        another thread's training call to end), or, while that training pauses
        between two steps, beside it."""
        me = threading.get_ident()
        with self._cond:
            while self._owner not in (None, me) and not self._paused:
                self._cond.wait()
            beside = self._owner not in (None, me)
            if beside:
                self._readers += 1
            else:
                self._owner, self._depth = me, self._depth + 1
        try:
            yield
        finally:
            if beside:
                with self._cond:
                    self._readers -= 1
                    self._cond.notify_all()
            else:
                self.release()

    # -- the holder, between two steps -------------------------------------------------

    @contextmanager
    def paused(self):
        """Within the block (the holder's callbacks at an epoch's end), readers of
        other threads may go ahead; on exit, wait until they are done. A no-op for
        a thread that does not hold the lock."""
        me = threading.get_ident()
        with self._cond:
            holds = self._owner == me
            if holds:
                self._paused += 1
                self._cond.notify_all()
        if not holds:
            yield
            return
        try:
            yield
        finally:
            with self._cond:
                while self._readers:
                    self._cond.wait()
                self._paused -= 1


#: one lock per estimator (not an attribute: estimators stay picklable and clonable)
_LOCKS = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def training_lock(net):
    """The lock that ``net``'s training (``with``) and its reads (``.reading()``) hold."""
    with _LOCKS_LOCK:
        lock = _LOCKS.get(net)
        if lock is None:
            lock = _LOCKS[net] = EstimatorLock()
        return lock
