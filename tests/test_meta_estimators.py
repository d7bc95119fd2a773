"""The user guide's table of scikit-learn meta-estimators, row by row.

Every row of the table in ``docs/user_guide.rst`` ("scikit-learn's
meta-estimators") is a case here: a "yes" row must run, a "no" row must raise
the error the table gives, and a row's route, where it has one, must run.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import make_estimator
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import BaggingRegressor, StackingRegressor, VotingRegressor
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.inspection import permutation_importance
from sklearn.linear_model import Ridge
from sklearn.model_selection import (
    GridSearchCV,
    HalvingGridSearchCV,
    RandomizedSearchCV,
    cross_val_predict,
    cross_validate,
    learning_curve,
    validation_curve,
)
from sklearn.multioutput import MultiOutputRegressor, RegressorChain
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from sparse_token_estimators import (
    FlattenTokens,
    make_sparse_selection,
)

T, D = 6, 2
X, Y = make_sparse_selection(120, T, D, 2, random_state=0)
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "user_guide.rst"


def _transformer():  # the catalogue's, with the package's batch size
    return make_estimator("transformer", device="cpu", batch_size=256)


def _fcn():
    return make_estimator("fcn", hidden_width=8, device="cpu", batch_size=256)


def _unflatten(X_flat):
    return X_flat.reshape(len(X_flat), T, D + 1)


GRID = {"lr": [0.01, 0.1]}

#: table row -> (the tool used as the table says, the route or None)
CASES = {
    "Pipeline": (lambda: make_pipeline(_transformer()).fit(X, Y).score(X, Y), None),
    "GridSearchCV": (lambda: GridSearchCV(_transformer(), GRID, cv=2).fit(X, Y), None),
    "RandomizedSearchCV": (lambda: RandomizedSearchCV(_transformer(), GRID, n_iter=2, cv=2,
                                                      random_state=0).fit(X, Y), None),
    "HalvingGridSearchCV": (lambda: HalvingGridSearchCV(
        _transformer(), GRID, cv=2, resource="max_epochs", min_resources=1, max_resources=2,
        random_state=0).fit(X, Y), None),
    "cross_validate": (lambda: cross_validate(_fcn(), X, Y, cv=2,
                                              scoring=["r2", "neg_mean_squared_error"]), None),
    "cross_val_predict": (lambda: cross_val_predict(_transformer(), X, Y, cv=2), None),
    "learning_curve": (lambda: learning_curve(_transformer(), X, Y, cv=2,
                                              train_sizes=[0.5, 1.0]), None),
    "validation_curve": (lambda: validation_curve(_transformer(), X, Y, param_name="lr",
                                                  param_range=[0.01, 0.1], cv=2), None),
    "TransformedTargetRegressor": (lambda: TransformedTargetRegressor(
        _transformer(), transformer=StandardScaler()).fit(X, Y).predict(X), None),
    "MultiOutputRegressor": (
        lambda: MultiOutputRegressor(_transformer()).fit(X, Y),
        lambda: MultiOutputRegressor(make_pipeline(FlattenTokens(), Ridge())).fit(X, Y)),
    "RegressorChain": (lambda: RegressorChain(_transformer()).fit(X, Y), None),
    "VotingRegressor": (
        lambda: VotingRegressor([("a", _transformer()), ("b", _fcn())]).fit(X, Y),
        lambda: np.mean([_transformer().fit(X, Y).predict(X), _fcn().fit(X, Y).predict(X)],
                        axis=0)),
    "StackingRegressor": (
        lambda: StackingRegressor([("a", _transformer()), ("b", _fcn())]).fit(X, Y), None),
    "BaggingRegressor": (lambda: BaggingRegressor(_transformer(), n_estimators=2).fit(X, Y),
                         None),
    "permutation_importance": (
        lambda: permutation_importance(_transformer().fit(X, Y), X, Y, n_repeats=2,
                                       random_state=0),
        lambda: permutation_importance(
            make_pipeline(FunctionTransformer(_unflatten), _transformer()).fit(
                X.reshape(120, -1), Y), X.reshape(120, -1), Y, n_repeats=2, random_state=0)),
}


def _table():
    """{tool: (works, error)} from the user guide's table."""
    text = GUIDE.read_text()
    start = text.index(".. _meta-estimators-table:")
    rule = re.compile(r"^=+( +=+)+$", re.M)
    rules = [m for m in rule.finditer(text, start)][:3]
    body = text[rules[1].end():rules[2].start()].strip().splitlines()
    columns = [m.span() for m in re.finditer("=+", rules[0].group())]
    rows, tool = {}, None
    for line in body:
        cells = [line[a:b if i < len(columns) - 1 else None].strip()
                 for i, (a, b) in enumerate(columns)]
        if cells[0]:  # a new row; a blank first cell continues the one above
            tool = cells[0].strip("`")
            rows[tool] = [cells[1], cells[2]]
        else:
            rows[tool][1] = f"{rows[tool][1]} {cells[2]}".strip()
    return rows


TABLE = _table()


def test_every_row_of_the_table_is_a_case_and_every_case_a_row():
    assert list(TABLE) == list(CASES)
    assert {works for works, _ in TABLE.values()} == {"yes", "no"}


@pytest.mark.parametrize("tool", list(CASES))
def test_the_tool_does_what_the_table_says(tool):
    works, note = TABLE[tool]
    use, route = CASES[tool]
    if works == "yes":
        use()
    else:
        error = re.search(r'"(.+?)"', note).group(1)  # the table quotes sklearn's message
        with pytest.raises(ValueError, match=re.escape(error)):
            use()
    if route is not None:
        route()
