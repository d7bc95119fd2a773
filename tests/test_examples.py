"""Every example runs, at tiny sizes (its first argument is the number of samples)."""

import contextlib
import importlib.util
import runpy
from pathlib import Path

import joblib
import pytest

# distributed_search.py starts a Dask cluster: tests/test_distributed.py runs it.
EXAMPLES = sorted(p for p in (Path(__file__).parent.parent / "examples").glob("*.py")
                  if p.name != "distributed_search.py")
TINY_SAMPLES = {"grid_search_widths.py": "150", "pipeline_comparison.py": "150",
                "compare_architectures.py": "150", "compare_critical_widths.py": "128"}


def test_all_examples_are_listed():
    assert {p.name for p in EXAMPLES} == {"quickstart.py", "grid_search_widths.py",
                                          "length_generalisation.py",
                                          "pipeline_comparison.py",
                                          "compare_architectures.py",
                                          "critical_width.py", "query_layout.py",
                                          "compare_critical_widths.py"}


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
    assert "took " in out  # every example says how long it took


def test_distributed_example_takes_the_number_of_sequences(monkeypatch, capsys):
    # As every example: the first argument is the number of training
    # sequences. The cluster is replaced by this process (test_distributed.py
    # runs the example on a real one).
    path = Path(__file__).parent.parent / "examples" / "distributed_search.py"
    spec = importlib.util.spec_from_file_location("distributed_search", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(example, "dask_backend",
                        lambda *args, **kwargs: contextlib.nullcontext("no cluster"))
    rows = example.main(["120", "--size", "tiny"])
    out = capsys.readouterr().out
    assert "Width sweep: 120 sequences" in out and "took " in out
    assert len(rows) == 4
    with pytest.raises(SystemExit):
        example.main(["3", "--size", "tiny"])
    assert "n_samples must be at least 4" in capsys.readouterr().err
