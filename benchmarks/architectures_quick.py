"""The reproduction's architectures experiment alone, at a preset: its time and numbers.

Fits what ``reproduce/_architectures.py`` plans and searches, as ``reproduce.run``
does, and prints the wall time, the fits' CPU time and the experiment's summary
(the figure goes to ``--figure``). The numbers of ``docs/reproduction.rst``'s
"More architectures" come from::

    python benchmarks/architectures_quick.py --scale quick
"""

import argparse
import time

from sparse_token_estimators import reproduce
from sparse_token_estimators.reproduce import SCALES
from sparse_token_estimators.reproduce._architectures import EXPERIMENT


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", choices=sorted(SCALES), default="quick")
    p.add_argument("--figure", default="architectures.png")
    args = p.parse_args()
    config = reproduce.with_sizes(SCALES[args.scale], experiments=(EXPERIMENT.name,))
    start = time.perf_counter()
    results = reproduce.run(config, progress=False)
    wall = time.perf_counter() - start
    cpu = sum(r["fit_cpu_s"] for r in results["fits"])
    print(f"{args.scale}: wall {wall:.1f} s, fit CPU {cpu:.1f} s over {len(results['fits'])} "
          "fits")
    print("\n".join(EXPERIMENT.summary(results)))
    EXPERIMENT.figures()["architectures.png"](results).savefig(args.figure, dpi=90)


if __name__ == "__main__":
    main()
