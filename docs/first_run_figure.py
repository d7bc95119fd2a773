"""Make ``docs/images/first_run.png``, the figure of the README and the index page.

It is ``make run``'s own output: the two figures a ``--scale first`` run
writes for its first two claims, ``width_separation.png`` and
``length_generalisation.png``, with their white margins trimmed, one above
the other. Stacked rather than side by side, each keeps its own width
(about 1000 pixels), so that its text stays legible where the page shows
the figure (about 880 pixels wide: legend text of about 10 pixels).

    make run                                      # writes results/
    python docs/first_run_figure.py results       # writes docs/images/first_run.png

The folder must hold a complete ``--scale first`` run (its ``manifest.json``
says so); ``--out`` writes the figure elsewhere.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parent
#: the figures of the first result, top to bottom
FIGURES = ("width_separation.png", "length_generalisation.png")
GAP = 24  # white pixels between the two figures


def check_run(folder):
    """Refuse a folder that is not a complete ``--scale first`` run, saying why."""
    manifest, results = folder / "manifest.json", folder / "results.json"
    if not manifest.exists() or not results.exists():
        sys.exit(f"{folder} holds no finished run (no manifest.json or results.json): "
                 f"run `make run` (or python -m sparse_token_estimators --scale first "
                 f"--out {folder}) first.")
    if not json.loads(manifest.read_text()).get("complete"):
        sys.exit(f"The run in {folder} is not complete (manifest.json): run the same "
                 "command again to finish it.")
    from sparse_token_estimators import reproduce

    first = list(reproduce.FIRST.experiments)
    experiments = json.loads(results.read_text())["config"]["experiments"]
    if experiments != first:
        sys.exit(f"{folder} holds a run of {experiments or 'every experiment'}, not of "
                 f"--scale first ({first}): the caption of the figure describes a "
                 "--scale first run.")
    missing = [name for name in FIGURES if not (folder / name).exists()]
    if missing:
        sys.exit(f"{folder} has no {', '.join(missing)}: the run was made with "
                 "--no-plots; run it again without.")


def trimmed(image, margin=8):
    """``image`` (H, W, channels) without its white border, keeping ``margin`` pixels."""
    ink = np.any(image[..., :3] < 0.98, axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    top, bottom = max(rows[0] - margin, 0), min(rows[-1] + margin + 1, image.shape[0])
    left, right = max(cols[0] - margin, 0), min(cols[-1] + margin + 1, image.shape[1])
    return image[top:bottom, left:right]


def stacked(images):
    """The images one above the other on white, left-aligned, ``GAP`` pixels apart."""
    width = max(image.shape[1] for image in images)
    parts = []
    for i, image in enumerate(images):
        if i:
            parts.append(np.ones((GAP, width, image.shape[2]), dtype=image.dtype))
        pad = np.ones((image.shape[0], width - image.shape[1], image.shape[2]),
                      dtype=image.dtype)
        parts.append(np.concatenate([image, pad], axis=1))
    return np.concatenate(parts, axis=0)


def main():
    import matplotlib.image

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="output folder of a --scale first run")
    p.add_argument("--out", type=Path, default=DOCS / "images" / "first_run.png",
                   help="where to write the figure (default: docs/images/first_run.png)")
    args = p.parse_args()
    check_run(args.run)
    images = [matplotlib.image.imread(args.run / name) for name in FIGURES]
    # every figure as RGB on white (a PNG may or may not carry an alpha channel)
    images = [image[..., :3] if image.shape[2] == 4 else image for image in images]
    figure = stacked([trimmed(image) for image in images])
    matplotlib.image.imsave(args.out, figure)
    print(f"wrote {args.out} ({figure.shape[1]} x {figure.shape[0]} pixels) from "
          f"{', '.join(str(args.run / name) for name in FIGURES)}")


if __name__ == "__main__":
    main()
