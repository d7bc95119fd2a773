"""The package uses no private name of skorch, scikit-learn or torch.

``benchmarks/estimator_layer.py`` parses every file of the package (``ast``) and
lists every private attribute or module of skorch, scikit-learn and torch they
touch, every private keyword passed to a call, and every object's private
attribute read in a file that does not define it; this test fails on one
beyond ``KNOWN``. (skorch's ``_default_callbacks`` is its hook for default
callbacks, which its own ``NeuralNetClassifier`` overrides: allowed, see
``HOOKS`` there.) And no file of the package is over 600 lines, no function
over 120.
"""

import importlib.util
import os
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "estimator_layer", os.path.join(ROOT, "benchmarks", "estimator_layer.py"))
layer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layer)


#: what is left, each with the files and why: the test fails on any other, and
#: on one of these that is gone (remove it here)
KNOWN = {
    # scikit-learn: the implementer's API of its callbacks: CallbackSupportMixin (public)
    # documents it ("document the private method", automethod in its docstring) as the
    # method an estimator's fit calls to open its root task; scikit-learn 1.9 has no
    # public name for it (_sklearn_callbacks.py)
    "_init_callback_context": {"_sklearn_callbacks.py"},
    # the estimators' declarations, read by their checks and rules (estimators/_checks.py,
    # _state.py, _rules.py's group_of) (to go when the parameters are declared on the classes)
    "_parameter_rules": {"_checks.py", "_rules.py", "_state.py"},
    "_check_seq_len": {"_checks.py"},
    "_check_sizes": {"_checks.py"},
    "_forward_args_supplied": {"_checks.py"},
    "_module_params": {"_checks.py", "_rules.py"},
    "_module_attributes": {"_rules.py", "_state.py"},
    "_sizes": {"_rules.py"},
}


def _found():
    files = layer.package_files(ROOT)
    found = {}
    for name, where in [*layer.private_names(files).items(),
                        *layer.foreign_private_attributes(files).items()]:
        found.setdefault(name, set()).update(place.split(":")[0] for place in where)
    return found


def test_no_private_name_of_skorch_scikit_learn_or_torch_is_touched():
    files = layer.package_files(ROOT)
    assert {path.name for path in files} >= {"_group.py", "_fused.py", "_base.py",
                                             "_paper.py", "__main__.py"}
    assert len(files) == sum(1 for _ in (Path(ROOT) / "sparse_token_estimators").rglob("*.py"))
    assert _found() == KNOWN


def test_no_file_of_the_package_over_600_lines_nor_function_over_120():
    assert layer.oversized(layer.package_files(ROOT)) == ({}, {})


def test_the_size_check_finds_long_files_and_functions(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("@staticmethod\ndef f():\n" + "    x = 1\n" * 4 + "\n" * 3
                    + "def g():\n    return 1\n")
    # f: 6 lines with its decorator; the file: 11
    assert layer.oversized([long], max_file=10, max_function=5) == (
        {"long.py": 11}, {"long.py:f": 6})
    assert layer.oversized([long], max_file=11, max_function=6) == ({}, {})


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


def test_the_check_finds_torch_s_private_names_keywords_and_foreign_attributes(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n"
                   "from torch._dynamo import config\n"
                   "def f(net, module, other):\n"
                   "    module._buffers.clear()\n"
                   "    torch._C.foo()\n"
                   "    net.partial_fit(1, _routing_method='fit')\n"
                   "    self_like = other._split(1)\n"
                   "    return module.__dict__, other._replace(a=1)\n")
    assert set(layer.private_names([bad])) == {"torch._dynamo", "_buffers", "torch._C"}
    assert set(layer.foreign_private_attributes([bad])) == {
        "_buffers", "_routing_method", "_split"}  # torch._C: above (a module's)
