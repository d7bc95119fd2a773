"""Every example runs, at tiny sizes (its first argument is the number of samples)."""

import runpy
from pathlib import Path

import joblib
import pytest

# distributed_search.py starts a Dask cluster: tests/test_distributed.py runs it.
EXAMPLES = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.py")
                  if p.name != "distributed_search.py")
TINY_SAMPLES = {"grid_search_widths.py": "150", "pipeline_comparison.py": "150"}


def test_all_examples_are_listed():
    assert {p.name for p in EXAMPLES} == {"quickstart.py", "grid_search_widths.py",
                                          "length_generalisation.py",
                                          "pipeline_comparison.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_example_runs(path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", [str(path), TINY_SAMPLES.get(path.name, "300")])
    # The examples use n_jobs=-1; in the tests one process is faster than
    # starting workers for fits this small.
    with joblib.parallel_config(backend="sequential"):
        runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "R^2" in out
    assert "nan" not in out.lower()
