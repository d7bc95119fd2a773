"""How the documentation runs the examples: small sizes, one torch thread.

sphinx-gallery calls these through ``sphinx_gallery_conf`` in ``docs/conf.py``
(by name, so that Sphinx can cache the configuration).
"""

from pathlib import Path

#: command-line arguments of each example in the gallery, in the gallery's
#: order: sizes that run in well under a minute on 2 CPU cores and still show
#: what the example claims
EXAMPLE_ARGS = {
    "quickstart.py": ["6000"],
    "grid_search_widths.py": ["3000"],
    "length_generalisation.py": ["5000"],
    "pipeline_comparison.py": ["3000"],
    "compare_architectures.py": ["2000"],
    "critical_width.py": ["2000"],
    # its stated size (five architectures, each a critical-width search: minutes)
    "compare_critical_widths.py": ["1024"],
    "query_layout.py": ["3000"],
    "distributed_search.py": ["--size", "tiny", "--n-workers", "2"],
}


def example_argv(gallery_conf, script_vars):
    """``sys.argv[1:]`` for an example: its size in ``EXAMPLE_ARGS``."""
    from sphinx.errors import ExtensionError  # imported here: the tests read this file

    name = Path(script_vars["src_file"]).name
    if name not in EXAMPLE_ARGS:
        raise ExtensionError(
            f"examples/{name} has no size for the documentation: add its arguments to "
            "EXAMPLE_ARGS in docs/gallery_conf.py (a size that runs in under a minute)."
        )
    return list(EXAMPLE_ARGS[name])


def example_order(filename):
    """Sort key of the gallery: the order of ``EXAMPLE_ARGS``."""
    names = list(EXAMPLE_ARGS)
    name = Path(filename).name
    return names.index(name) if name in names else len(names)


def one_torch_thread(gallery_conf, fname):
    """Before each example: torch on one thread.

    The examples' fits are small; on a machine that other jobs keep busy, more
    threads make them several times slower, and one thread keeps the numbers
    the same from build to build.
    """
    import torch

    torch.set_num_threads(1)
