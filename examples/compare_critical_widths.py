"""
Five architectures compared by critical width, in one call
==========================================================

:func:`~sparse_token_estimators.compare_critical_widths` runs
:func:`~sparse_token_estimators.critical_width` for each estimator at each
sequence length T with the reproduction's recipe (every width at every peak
rate of a grid, the rate decayed to 0 by a cosine over each fit's steps,
fresh training sequences every epoch, the bracketing widths refitted with
twice the steps) and returns one row per estimator and T: the smallest width
whose best mean validation R^2 reaches 0.8, its status, its bracket and its
chosen rate, and each estimator's log-log slope of width against T.

Here the five estimators of the package (the paper's transformer, the FCN,
a transformer encoder with rotary positions, a GRU and Mamba, a selective
state-space model: ``SparseTokenSSM``, the ``[ssm]`` extra) in the *query
layout*, where a model must match positions (Sanford, Hsu & Telgarsky,
NeurIPS 2023; Wang, Wei, Hsu & Lee, ICML 2024), at small T, one seed and
few steps: a sketch of the reproduction's verdict 7 that runs in minutes,
not its measurement (the recurrent nets and Mamba need far more steps than
this; a "> stop" here is a width beyond what these steps train).

Run it as a script, with the number of training sequences per epoch as its
argument::

    python examples/compare_critical_widths.py        # 1024 sequences (time below)
    python examples/compare_critical_widths.py 300    # fewer

Measured here (2026-12-05, 2 idle CPU cores, ``/usr/bin/time python
examples/compare_critical_widths.py``): 106 fits, 2 min 4 s of wall time,
165 s of CPU time (the process and its two workers; the fits run two at a
time, ``n_jobs=2``).
"""

# %%
# The comparison
# --------------
# Each estimator gets ``layout="query"`` and ``lr_schedule="cosine"`` from
# the call; its ``max_epochs`` is the base steps (``n_train`` / ``batch_size``
# steps per epoch), doubled by the steps check.
import sys
import time

import matplotlib.pyplot as plt

from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenSSM,
    SparseTokenTransformer,
    compare_critical_widths,
)
from sparse_token_estimators.model_selection import plot_critical_widths

start = time.perf_counter()
n_train = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
common = {"max_epochs": 30, "batch_size": 64, "device": "cpu"}
estimators = {
    "transformer (paper)": SparseTokenTransformer(n_pe_draws=1, **common),
    "FCN": SparseTokenFCN(**common),
    "encoder, RoPE": SparseTokenEncoder(positional_encoding="rope", **common),
    "GRU": SparseTokenRNN(cell="gru", **common),
    "Mamba": SparseTokenSSM(**common),
}
table = compare_critical_widths(
    estimators, seq_lens=(4, 8), token_dim=2, n_selected=2, layout="query",
    n_train=n_train, n_val=512, lr_grid=(0.003, 0.01, 0.03), target=0.8,
    start=4, stop=16, floor=2, seeds=(0,), random_state=0, n_jobs=2)

# %%
# The table
# ---------
# One row per estimator and T; ``lower`` and ``upper`` bracket the crossing,
# ``lr`` is the chosen peak rate, ``slope`` the log-log slope over the
# resolved T.
shown = table.drop(columns=["param", "reason", "n_fits"]).round(3).astype(object)
print(f"Query layout, d = 2, q = 2, {n_train} fresh sequences per epoch, seed 0; "
      "the smallest width whose best mean validation R^2 reaches 0.8")
print(shown.where(table.notna(), "-").to_string(index=False))
print(f"\n{int(table['n_fits'].sum())} fits, took {time.perf_counter() - start:.0f} s")

# %%
# Width against T
# ---------------
# Filled circles: widths found, dashed: each fitted power law; open
# triangles: searches that ended beyond their stop (drawn at the stop).
fig, ax = plt.subplots(figsize=(6.5, 4.2))
plot_critical_widths(table, ax=ax)
ax.set_title("Critical width (validation R^2 0.8), query layout, d = 2, q = 2")
fig.tight_layout()
plt.show()
