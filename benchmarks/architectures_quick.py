"""The reproduction's architectures experiment alone, at a preset: its time and numbers.

Fits what ``reproduce/_architectures.py`` plans and searches, as ``reproduce.run``
does, and prints the wall time, the fits' CPU time and the experiment's summary
(the figure goes to ``--figure``). The numbers of ``docs/reproduction.rst``'s
"More architectures" come from::

    python benchmarks/architectures_quick.py --scale quick
"""

import argparse
import time
from dataclasses import asdict

from sparse_token_estimators.reproduce import SCALES
from sparse_token_estimators.reproduce._architectures import EXPERIMENT
from sparse_token_estimators.reproduce._fits import MODELS, describe_models, run_fits
from sparse_token_estimators.reproduce._progress import Progress, count_finished_tasks
from sparse_token_estimators.reproduce._run import _fit_round


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", choices=sorted(SCALES), default="quick")
    p.add_argument("--figure", default="architectures.png")
    args = p.parse_args()
    config = SCALES[args.scale]
    start = time.perf_counter()
    used_by = {fit: [EXPERIMENT.name] for fit in EXPERIMENT.fits(config)}
    progress = Progress(len(used_by) * config.n_seeds, enabled=False)
    with count_finished_tasks(progress.advance):
        records = run_fits(config, used_by, progress)
        EXPERIMENT.search(config, _fit_round(config, EXPERIMENT.name, records, used_by,
                                             progress))
    wall = time.perf_counter() - start
    models = [m for m in MODELS if any(f.model == m for f in used_by)]
    results = {"config": asdict(config), "models": describe_models(config, models),
               EXPERIMENT.name: EXPERIMENT.collect(config, records)}
    cpu = sum(r["fit_cpu_s"] for r in records.values())
    print(f"{args.scale}: wall {wall:.1f} s, fit CPU {cpu:.1f} s over {len(records)} fits")
    print("\n".join(EXPERIMENT.summary(results)))
    EXPERIMENT.figures()["architectures.png"](results).savefig(args.figure, dpi=90)


if __name__ == "__main__":
    main()
