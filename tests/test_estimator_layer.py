"""The estimator layer uses no private name of skorch or scikit-learn.

``benchmarks/estimator_layer.py`` parses the layer's files (``ast``) and lists every
private attribute or module of skorch and scikit-learn they touch; this test fails
on one. (skorch's ``_default_callbacks`` is its hook for default callbacks, which
its own ``NeuralNetClassifier`` overrides: allowed, see ``HOOKS`` there.)
"""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "estimator_layer", os.path.join(ROOT, "benchmarks", "estimator_layer.py"))
layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layer)


def test_no_private_name_of_skorch_or_scikit_learn_is_touched():
    files = layer.layer_files(ROOT)
    assert any(path.parent.name == "estimators" for path in files)
    assert layer.private_names(files) == {}


def test_the_check_finds_private_names(tmp_path):
    # what it would report: skorch's private attributes, strings and modules
    bad = tmp_path / "bad.py"
    bad.write_text("from sklearn.utils._param_validation import Interval\n"
                   "def f(net):\n"
                   "    net._set_training(False)\n"
                   "    return net.__dict__['_params_to_validate'], net._modules\n")
    found = layer.private_names([bad])
    assert set(found) == {"sklearn.utils._param_validation", "_set_training",
                          "_params_to_validate", "_modules"}
    assert found["_set_training"] == ["bad.py:3"]
