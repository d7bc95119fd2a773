"""
The critical width of the transformer, with its best case beside it
===================================================================

:func:`~sparse_token_estimators.critical_width` finds the
smallest ``pe_dim`` at which the paper's transformer (Wang, Wei, Hsu & Lee,
ICML 2024) reaches validation R^2 0.8, by the protocol of the
reproduction: every width is fitted at every rate of a learning-rate grid
(3 rates spanning 16x) and for every seed, a width scores its best mean
validation R^2, the widths are bracketed (grown by 2, then bisected down to
a ratio of sqrt(2)), the crossing is confirmed at the next width, and the
two bracketing widths are refitted with twice the epochs: if the bracket
moves, the answer is "unresolved". Beside it,
:func:`~sparse_token_estimators.theory.pe_dim_best` is the best case, the
smallest ``pe_dim`` at which W = c I, at its best c and with no training,
reaches the same R^2.

Run it as a script, with the number of training sequences as its argument::

    python examples/critical_width.py          # 4000 sequences (time below)
    python examples/critical_width.py 1000     # fewer

Measured here with 4000 sequences: 159 s of wall time on 2 CPU cores shared
with other jobs (load average about 12), 40 s of CPU time (2026-12-05).
"""

# %%
# The search
# ----------
# Every round's fits (3 rates x 2 seeds) run in parallel (``n_jobs=-1``);
# under ``joblib.parallel_config("dask")`` they would run on a Dask cluster.
import sys
import time

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import NullLocator

from sparse_token_estimators import SparseTokenTransformer, critical_width, make_sparse_selection
from sparse_token_estimators.theory import best_case_r2, pe_dim_best

start = time.perf_counter()
n_samples = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
T, d, q = 8, 4, 3
X, y = make_sparse_selection(n_samples, T, d, q, random_state=0)
X_val, y_val = make_sparse_selection(1000, T, d, q, random_state=1)
X_test, y_test = make_sparse_selection(1000, T, d, q, random_state=2)

est = SparseTokenTransformer(n_pe_draws=1, max_epochs=10, batch_size=128, device="cpu")
result = critical_width(est, "pe_dim", X, y, lr_grid=[0.005, 0.02, 0.08], target=0.8,
                        start=4, stop=64, seeds=(0, 1), validation=(X_val, y_val),
                        test=(X_test, y_test), n_jobs=-1)
best = pe_dim_best(T, q)
print(f"The paper's model (n_pe_draws=1), T = {T}, q = {q}, {n_samples} training sequences; "
      "validation R^2, mean over seeds 0 and 1")
print(f"critical pe_dim: {result.width} ({result.status}: {result.reason})")
print(f"best case (W = c I, no training): pe_dim_best = {best}, "
      f"c = {best_case_r2(T, q, best).c:.2f}")

# %%
# Every fit
# ---------
# ``result.table`` has one row per fit, which ``pandas.DataFrame`` takes as
# is: here the mean validation R^2 over the seeds of every width (rows) at
# every rate (columns), the steps check apart. The chosen rate of each width
# is ``result.chosen_lr``.
table = pd.DataFrame(result.table)
once = table[table["steps_multiplier"] == 1]
print(once.pivot_table(index="width", columns="lr", values="val_score").round(3))
print("\nchosen rate per width:", result.chosen_lr)

# %%
# The score of every width, the target and the widths found
# ---------------------------------------------------------
# Integer widths on a log axis; the target as a dashed line, the critical
# width found by the search (red) and the best case (orange) as vertical lines.
widths = list(result.scores)
fig, ax = plt.subplots(figsize=(5.5, 3.8))
ax.plot(widths, list(result.scores.values()), "o-", label="best mean validation R^2")
ax.axhline(result.target, color="grey", lw=0.8, ls="--", label=f"target R^2 {result.target}")
if result.width is not None:
    ax.axvline(result.width, color="C3", lw=1.2,
               label=f"critical pe_dim {result.width} ({result.status})")
ax.axvline(best, color="C1", lw=1, ls=":", label=f"best case pe_dim_best = {best}")
ax.set_xscale("log")
ax.set_xticks(widths, [str(w) for w in widths])  # the best case is named in the legend
ax.xaxis.set_minor_locator(NullLocator())
ax.set(xlabel="pe_dim", ylabel="R^2", title=f"The paper's model, T = {T}, q = {q}")
ax.legend(fontsize=8)
fig.tight_layout()

print(f"\ntook {time.perf_counter() - start:.0f} s")
