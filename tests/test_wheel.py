"""The wheel installs on its own and runs the README quickstart.

The wheel is installed into a fresh virtual environment that borrows only the
dependencies (numpy, torch, ...) from the environment running the tests, and
the quickstart runs from a temporary directory in isolated mode (``python
-I``: no ``PYTHONPATH``, no current directory on the path), so it imports the
installed package, never this source tree. The test checks that it did.

CI builds the wheel with ``python -m build`` and passes it in
``SPARSE_TOKEN_ESTIMATORS_WHEEL``; without it the test builds one offline
(``pip wheel --no-build-isolation``, which needs the setuptools of the test
extra).
"""

import json
import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import sparse_token_estimators

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "sparse-token-estimators"


def readme_quickstart():
    """The first Python block of the README's Quickstart section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "README.md's Quickstart section has no ```python block"
    return blocks[0]


# Runs inside the wheel's environment. The README's sizes shrink to
# 128 sequences (one batch) by wrapping the generator the quickstart imports, and
# n_jobs runs in threads (new worker processes would spend most of the test
# importing torch); the code itself runs as written.
RUNNER = """
import importlib.metadata, json, sys
import joblib
import sparse_token_estimators as package

full_size = package.make_sparse_selection
def make_sparse_selection(n_samples=1000, *args, **kwargs):
    return full_size(min(n_samples, 128), *args, **kwargs)
package.make_sparse_selection = make_sparse_selection

namespace = {}
with joblib.parallel_config(backend="threading"):
    exec(compile(sys.stdin.read(), "README.md quickstart", "exec"), namespace)
print(json.dumps({
    "file": package.__file__,
    "version": package.__version__,
    "metadata_version": importlib.metadata.version("sparse-token-estimators"),
    "scripts": sorted(e.name for e in importlib.metadata.entry_points(group="console_scripts")
                      if e.value.startswith("sparse_token_estimators")),
    "score": float(namespace["est"].score(namespace["X_test"], namespace["y_test"])),
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    given = os.environ.get("SPARSE_TOKEN_ESTIMATORS_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)], check=True)
    (path,) = out.glob("*.whl")
    return path


@pytest.fixture(scope="module")
def wheel_env(wheel, tmp_path_factory):
    """A new virtual environment holding the wheel; its python."""
    env = tmp_path_factory.mktemp("wheel-env")
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    # The dependencies come from this environment's site-packages, listed
    # after the new one's own, so the wheel's copy of the package comes first.
    # (Only plain paths: this environment's .pth files, such as an editable
    # install of the package, are not read.)
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "_dependencies.pth").write_text("\n".join(sorted(here)) + "\n")
    # --ignore-installed: pip sees the package this environment may hold (an
    # editable install) and would otherwise call the wheel already installed.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--ignore-installed", str(wheel)], check=True)
    return env, python


def test_wheel_carries_the_package_licence_and_metadata(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        fields = archive.read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "sparse_token_estimators/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "docs/", "examples/"))]
    assert f"Version: {sparse_token_estimators.__version__}\n" in fields
    assert "License-Expression: BSD-3-Clause\n" in fields


def test_installed_wheel_runs_the_readme_quickstart(wheel_env, tmp_path):
    env, python = wheel_env
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([str(python), "-I", "-c", RUNNER], input=readme_quickstart(),
                          cwd=tmp_path, env={**clean, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the installed package ran, not this source tree
    assert Path(result["file"]).resolve().is_relative_to(env.resolve())
    assert not Path(result["file"]).resolve().is_relative_to(ROOT)
    # one version, the package's, is also the distribution's
    assert result["version"] == result["metadata_version"] == sparse_token_estimators.__version__
    assert result["scripts"] == ["sparse-token-reproduce"]
    assert (env / "bin" / "sparse-token-reproduce").exists()
    assert -1.0 < result["score"] <= 1.0  # R^2 of the quickstart's held-out data
