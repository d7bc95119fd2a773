"""Run scikit-learn searches over the estimators on a Dask cluster.

scikit-learn parallelises ``GridSearchCV``, ``cross_validate`` and friends
through joblib, and joblib's ``"dask"`` backend sends that work to a
``dask.distributed`` cluster. The estimators need nothing special there: they
pickle to the workers, resolve ``device="auto"`` on the worker at fit time,
and run torch on the one thread per task that Dask's nanny gives each worker
process (``OMP_NUM_THREADS=1``). :func:`dask_backend` connects (or starts a
local cluster), enters that backend, and makes the search's data recoverable,
so that a search survives the loss of a worker. It needs the extra:
``pip install -e ".[distributed]"`` from the package's clone.
"""

import asyncio
import os
import pickle
import sys
import uuid
from contextlib import ExitStack, contextmanager

import joblib

_INSTALL_HINT = (
    "Running searches on Dask needs dask.distributed: install it with "
    'pip install -e ".[distributed]" from the package\'s clone.'
)

#: environment the nanny passes to its worker processes, per Dask's config
_WORKER_ENVIRON = "distributed.nanny.pre-spawn-environ"


def _import_distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return distributed


def _scheduler_identity(address, timeout):
    """The kind of Dask server at ``address`` ("Scheduler", "Worker", ...), or None.

    One identity request, the whole exchange bounded by ``timeout`` seconds:
    a peer that accepts the connection but does not speak Dask's protocol
    (another service on that port) gives None in that time, where a client
    would wait on it (the command line's check of ``--scheduler``).
    """
    from distributed.comm import connect

    async def ask():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(ask(), timeout))
    except Exception:  # refused, closed, timed out, not Dask's framing: not a Dask server
        return None
    kind = reply.get("type") if isinstance(reply, dict) else None
    return kind if isinstance(kind, str) else None


async def _ready(value):
    return value


class _RecoverableScatter:
    """A ``distributed.Client`` whose ``scatter`` gives data Dask can recompute.

    joblib's Dask backend scatters the large arguments of a search (``X``,
    ``y``, the CV index arrays) to one worker each. Scattered data has no
    recipe: when its worker dies it is gone, and every fit that needs it is
    cancelled with the whole search, although Dask would reschedule the fits
    themselves. (Broadcast copies do not help: Dask's memory manager drops
    replicas nobody waits for.) Here each argument is instead the result of a
    task that unpickles it; the scheduler keeps that task, so a lost copy is
    recomputed like any other lost result. The argument travels pickled, so
    the scheduler needs neither this package nor numpy to hold it.
    """

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def scatter(self, data, asynchronous=False, **kwargs):
        import cloudpickle
        import dask

        # The data travels inside the task, once, by design: silence Dask's
        # advice to scatter it instead.
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": sys.maxsize}):
            future = self._client.submit(pickle.loads, cloudpickle.dumps(data),
                                         key=f"search-data-{uuid.uuid4().hex}")
        return _ready(future) if asynchronous else future


def _restore_environ(stack, names):
    """On exit of ``stack``, give ``names`` in ``os.environ`` their current values."""
    saved = {name: os.environ.get(name) for name in names}
    for name, value in saved.items():
        if value is None:
            stack.callback(os.environ.pop, name, None)
        else:
            stack.callback(os.environ.__setitem__, name, value)


def _local_cluster(distributed, stack, n_workers, cluster_kwargs):
    import dask

    cluster_kwargs.setdefault("threads_per_worker", 1)
    # The nanny sets its workers' environment in this process too (Dask's
    # documented side effect); leave the process as it was found.
    _restore_environ(stack, [*dask.config.get(_WORKER_ENVIRON), "PYTHONHASHSEED"])
    # Dask's default MALLOC_TRIM_THRESHOLD_ makes glibc serve every tensor
    # from fresh pages: torch fits in such a worker cost 1.3-1.8x the CPU time.
    with dask.config.set({f"{_WORKER_ENVIRON}.MALLOC_TRIM_THRESHOLD_": None}):
        return stack.enter_context(
            distributed.LocalCluster(n_workers=n_workers, **cluster_kwargs))


@contextmanager
def dask_backend(scheduler=None, *, n_workers=None, **cluster_kwargs):
    """Send joblib-parallel work (``GridSearchCV``, ``cross_validate``, ...) to Dask.

    Inside the block, scikit-learn's parallel loops run as tasks on the
    cluster, one fit per worker thread (``n_jobs=None`` then means every
    thread of the cluster). This is ``joblib.parallel_config("dask")`` plus
    what a long search needs: the data joblib sends to the workers (``X``,
    ``y``, the CV splits) is kept recoverable, so a worker lost in the middle
    of a search costs only the fits it was running, which Dask reschedules;
    the scheduler holds one copy of that data for the duration of the search.
    The client, and the local cluster if one was started, close on exit.

    Parameters
    ----------
    scheduler : str, distributed cluster or None, default=None
        Address of a running scheduler (``"tcp://host:8786"``), a cluster
        object (e.g. ``dask_cuda.LocalCUDACluster()``, one worker per GPU), or
        None to start a ``distributed.LocalCluster`` for the duration of the
        block: worker processes with one thread each, without Dask's
        ``MALLOC_TRIM_THRESHOLD_``, which slows torch fits (measured in the
        user guide's Dask section).
    n_workers : int or None, default=None
        Workers of the local cluster; None gives one per CPU core. Only with
        ``scheduler=None``.
    **cluster_kwargs
        Passed on to ``distributed.LocalCluster`` (only with
        ``scheduler=None``), e.g. ``processes=False`` for worker threads in
        this process.

    Yields
    ------
    client : distributed.Client
        The connected client.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from sparse_token_estimators import SparseTokenFCN, make_sparse_selection
    >>> from sparse_token_estimators.distributed import dask_backend
    >>> X, y = make_sparse_selection(200, seq_len=6, token_dim=3, random_state=0)
    >>> search = GridSearchCV(SparseTokenFCN(max_epochs=2, random_state=0),
    ...                       {"hidden_width": [8, 16]}, cv=2)
    >>> with dask_backend(n_workers=1, processes=False):
    ...     search = search.fit(X, y)
    >>> search.cv_results_["mean_test_score"].shape
    (2,)
    """
    distributed = _import_distributed()
    if scheduler is not None and (n_workers is not None or cluster_kwargs):
        raise ValueError(
            "n_workers and cluster options only apply to the local cluster that "
            "dask_backend starts when scheduler is None; configure the cluster at "
            f"{scheduler!r} where it is started (e.g. dask worker --nthreads 1)."
        )
    with ExitStack() as stack:
        if scheduler is None:
            scheduler = _local_cluster(distributed, stack, n_workers, cluster_kwargs)
        client = stack.enter_context(distributed.Client(scheduler))
        stack.enter_context(
            joblib.parallel_config("dask", client=_RecoverableScatter(client)))
        yield client
