"""scikit-learn's callbacks (``sklearn.callback``) and scikit-learn's repr.

Each fit of an estimator is a task of scikit-learn's callbacks with one sub-task
per epoch, also when a ``GridSearchCV``, a ``Pipeline``, ``cross_validate`` or
``critical_width`` runs it; without ``sklearn.callback`` (scikit-learn < 1.9)
everything else works as before (a subprocess that hides the module).
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import make_pipeline

from sparse_token_estimators import (
    SparseTokenFCN,
    SparseTokenTransformer,
    critical_width,
    make_sparse_selection,
)

X, Y = make_sparse_selection(96, seq_len=4, token_dim=2, n_selected=2, random_state=0)
EPOCHS = 3


def _needs_callbacks():
    return pytest.importorskip("sklearn.callback", reason="scikit-learn < 1.9: no callbacks")


class Recorder:
    """A callback that records every hook, propagated to every depth (as ProgressBar
    with ``max_propagation_depth=None``)."""

    max_propagation_depth = None

    def __init__(self):
        self.events = []

    def setup(self, estimator, context):
        pass

    def teardown(self, estimator, context):
        pass

    def on_fit_task_begin(self, estimator, context):
        self.events.append(("begin", context))

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None):
        self.events.append(("end", context))


def fits_and_epochs(recorder, name):
    """For each fit of estimator ``name`` (its root task, in order): the task of the
    search it was merged with (None alone), and how many epoch tasks began and
    ended under it."""
    fits = {}
    for event, context in recorder.events:
        if context.estimator_name != name:
            continue
        if context.task_name == "fit":
            fits.setdefault(id(context), [context, 0, 0])
        elif context.task_name == "epoch":
            entry = fits[id(context.parent)]
            entry[1 if event == "begin" else 2] += 1
    return [(ctx.source_task_name, begun, ended) for ctx, begun, ended in fits.values()]


@pytest.mark.parametrize("make, grid", [
    (lambda: SparseTokenTransformer(pe_dim=4, max_epochs=EPOCHS, device="cpu"),
     {"pe_dim": [4, 8]}),
    (lambda: SparseTokenFCN(hidden_width=4, max_epochs=EPOCHS, device="cpu"),
     {"hidden_width": [4, 8]}),
])
def test_a_search_with_a_progress_bar_reports_each_fits_epochs(make, grid):
    callback = _needs_callbacks()
    pytest.importorskip("rich", reason="ProgressBar needs rich")
    recorder = Recorder()
    search = GridSearchCV(make(), grid, cv=2).set_callbacks(callback.ProgressBar(), recorder)
    search.fit(X, Y)
    fits = fits_and_epochs(recorder, type(search.estimator).__name__)
    # 2 candidates x 2 splits, then the refit: each its own fit with every epoch
    assert len(fits) == 5
    assert all(begun == ended == EPOCHS for _, begun, ended in fits)
    assert [source for source, _, _ in fits] == (
        ["candidate-split-evaluation"] * 4 + ["refit-with-best-params"])
    assert not hasattr(search.best_estimator_, "_skl_callbacks")  # propagated ones removed


def test_a_pipeline_and_cross_validate_propagate_them():
    _needs_callbacks()
    recorder = Recorder()
    pipe = make_pipeline(SparseTokenFCN(hidden_width=4, max_epochs=EPOCHS, device="cpu"))
    cross_validate(pipe.set_callbacks(recorder), X, Y, cv=2)
    fits = fits_and_epochs(recorder, "SparseTokenFCN")
    assert len(fits) == 2 and all(b == e == EPOCHS for _, b, e in fits)
    assert {source for source, _, _ in fits} == {"fit-final-estimator"}


def test_the_callbacks_change_nothing_of_the_fit_and_score_each_epoch():
    callback = _needs_callbacks()
    monitor = callback.ScoringMonitor(scoring="r2")
    watched = SparseTokenFCN(hidden_width=8, max_epochs=EPOCHS, device="cpu",
                             random_state=0).set_callbacks(monitor).fit(X, Y)
    plain = SparseTokenFCN(hidden_width=8, max_epochs=EPOCHS, device="cpu",
                           random_state=0).fit(X, Y)
    np.testing.assert_array_equal(watched.predict(X), plain.predict(X))
    rows = monitor.get_logs().data
    epochs = [row["r2"] for row in rows if row["task_name"] == "epoch"]
    assert len(epochs) == EPOCHS
    assert epochs[-1] == pytest.approx(plain.score(X, Y))  # the last epoch is the fit
    # skorch's own callbacks and scikit-learn's together; set_callbacks() clears them
    from skorch.callbacks import EpochTimer

    both = SparseTokenFCN(hidden_width=8, max_epochs=EPOCHS, device="cpu",
                          callbacks=[("timer2", EpochTimer())]).set_callbacks(Recorder())
    both.fit(X, Y)
    assert len(both.history_) == EPOCHS
    assert "_skl_callbacks" not in clone(both.set_callbacks()).__dict__


def test_critical_width_reports_its_widths_fits_and_epochs():
    callback = _needs_callbacks()
    pytest.importorskip("rich", reason="ProgressBar needs rich")
    recorder = Recorder()
    est = SparseTokenFCN(max_epochs=2, device="cpu")
    args = dict(lr_grid=[0.003, 0.01, 0.03], target=0.3, start=4, stop=8, seeds=(0,))
    X_cw, y_cw = make_sparse_selection(300, seq_len=4, token_dim=2, n_selected=2,
                                       random_state=0)
    result = critical_width(est, "hidden_width", X_cw, y_cw,
                            callbacks=[callback.ProgressBar(), recorder], **args)
    fits = fits_and_epochs(recorder, "SparseTokenFCN")
    assert len(fits) == len(result.table)  # every fit, the steps check's too
    multiplier = [row["steps_multiplier"] for row in result.table]
    assert [b for _, b, _ in fits] == [2 * m for m in multiplier]
    assert all(b == e for _, b, e in fits)
    assert {source for source, _, _ in fits} == {"fit"}  # a fit task of the search
    widths = [ctx.task_name for event, ctx in recorder.events
              if event == "begin" and ctx.estimator_name == "critical_width"
              and ctx.task_name.startswith("hidden_width=")]
    assert widths == list(dict.fromkeys(
        f"hidden_width={row['width']}, steps x{row['steps_multiplier']}"
        for row in result.table))
    # the same search as without callbacks
    plain = critical_width(est, "hidden_width", X_cw, y_cw, **args)
    assert plain.scores == result.scores and plain.width == result.width


# -- repr --------------------------------------------------------------------------------

def test_the_repr_is_scikit_learns_alone_in_a_pipeline_and_in_a_search():
    est = SparseTokenTransformer(pe_dim=8)
    assert repr(est) == "SparseTokenTransformer(pe_dim=8)"
    assert repr(make_pipeline(est)) == (
        "Pipeline(steps=[('sparsetokentransformer', SparseTokenTransformer(pe_dim=8))])")
    search = repr(GridSearchCV(est, {"pe_dim": [4, 8]}))
    assert search.startswith("GridSearchCV(estimator=SparseTokenTransformer(pe_dim=8),")
    assert "param_grid={'pe_dim': [4, 8]}" in search
    # skorch's parameters show when set, and clone keeps them
    import torch

    odd = SparseTokenFCN(criterion=torch.nn.L1Loss, iterator_train__shuffle=False)
    assert "criterion=<class 'torch.nn.modules.loss.L1Loss'>" in repr(make_pipeline(odd))
    twin = clone(odd)
    assert twin.criterion is torch.nn.L1Loss and twin.iterator_train__shuffle is False
    assert not any(name.startswith("_") for name in odd.get_params(deep=True))


# -- without sklearn.callback ------------------------------------------------------------

# scikit-learn imports sklearn.callback itself (at import and in fit): it is hidden
# while the package is imported only, so that its "from sklearn.callback import ..."
# fails as on scikit-learn 1.6
HIDE_CALLBACKS = """
import importlib, sys
import sklearn.model_selection, sklearn.pipeline, skorch  # noqa: F401

hidden = {n: m for n, m in sys.modules.items() if n.split(".")[:2] == ["sklearn", "callback"]}
sys.modules.update(dict.fromkeys(hidden))
for name in ("estimators", "model_selection", "_sklearn_callbacks"):
    importlib.import_module("sparse_token_estimators." + name)
sys.modules.update(hidden)
"""


def test_without_sklearn_callback_everything_else_works():
    code = HIDE_CALLBACKS + textwrap.dedent("""
        import pytest
        from sklearn.model_selection import GridSearchCV
        from sklearn.pipeline import make_pipeline
        from sparse_token_estimators import (SparseTokenFCN, critical_width,
                                             make_sparse_selection)
        from sparse_token_estimators import _sklearn_callbacks

        assert not _sklearn_callbacks.HAS_CALLBACKS
        X, y = make_sparse_selection(200, seq_len=4, token_dim=2, random_state=0)
        est = SparseTokenFCN(hidden_width=4, max_epochs=2, device="cpu")
        assert not hasattr(est, "set_callbacks")
        GridSearchCV(est, {"hidden_width": [4, 8]}, cv=2).fit(X, y)
        assert "SparseTokenFCN(device='cpu', hidden_width=4, max_epochs=2)" in repr(
            make_pipeline(est)), repr(make_pipeline(est))
        args = dict(lr_grid=[0.003, 0.01, 0.03], target=0.3, start=4, stop=8, seeds=(0,))
        critical_width(est, "hidden_width", X, y, **args)
        with pytest.raises(ValueError, match="scikit-learn >= 1.9"):
            critical_width(est, "hidden_width", X, y, callbacks=[object()], **args)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
