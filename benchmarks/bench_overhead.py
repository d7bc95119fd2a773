"""The paper's model's per-batch overhead: its estimator's fit against a minimal hand loop.

At the quick preset's search size (T = 64, d_p = 76, one positional draw,
batch 32), the estimator's ``fit`` and a hand-written loop over the same
module make the same steps: same seeds (the estimator's ``random_state``
split as the estimator splits it), same shuffling and positional draws from
one generator, same Adam. The loop first checks that both end with
bit-identical weights, then times them side by side; the ratio fit / hand
loop is skorch's and the estimator's per-batch bookkeeping (target <= 1.10).

    python benchmarks/bench_overhead.py --quick
"""

import numpy as np
import torch
from sklearn.utils import check_random_state

import common
from sparse_token_estimators import SparseTokenTransformer, make_sparse_selection
from sparse_token_estimators.modules import SparseTokenAttention

T, D, Q, PE_DIM, BATCH, LR = 64, 8, 3, 76, 32, 0.01


def estimator_fit(X, y, epochs):
    return SparseTokenTransformer(pe_dim=PE_DIM, n_pe_draws=1, lr=LR, max_epochs=epochs,
                                  batch_size=BATCH, random_state=0, device="cpu").fit(X, y)


def hand_loop(X, y, epochs):
    """What the estimator's fit computes, without skorch: the same numbers."""
    seeds = check_random_state(0).randint(np.iinfo(np.int32).max, size=3).tolist()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds[0])
        module = SparseTokenAttention(token_dim=D, pe_dim=PE_DIM, n_pe_draws=1,
                                      eval_seed=seeds[2])
    generator = torch.Generator().manual_seed(seeds[1])
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    optimizer = torch.optim.Adam(module.parameters(), lr=LR)
    criterion = torch.nn.MSELoss()
    module.train()
    for _ in range(epochs):
        # TensorBatches draws as DataLoader does: a worker seed, the permutation, and
        # RandomSampler's unused permutation at the end of the epoch
        torch.empty((), dtype=torch.int64).random_(generator=generator)
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), BATCH):
            index = order[start:start + BATCH]
            X_batch, y_batch = X.index_select(0, index), y.index_select(0, index)
            optimizer.zero_grad()
            noise = module.draw_noise(X_batch, generator=generator)
            loss = criterion(module(X_batch, noise=noise), y_batch)
            loss.backward()
            optimizer.step()
        torch.randperm(len(X), generator=generator)
    return module


def main():
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    repeats = common.setup(args, repeats=7, quick_repeats=3)
    n, epochs = (1024, 2) if args.quick else (4096, 2)
    X, y = make_sparse_selection(n, T, D, Q, random_state=0)
    same = torch.equal(estimator_fit(X, y, epochs).module_.W, hand_loop(X, y, epochs).W)
    print(f"bit-identical weights: {same}")
    times = common.compare({"estimator": lambda: estimator_fit(X, y, epochs),
                            "hand loop": lambda: hand_loop(X, y, epochs)}, repeats=repeats)
    row = {"model": "paper's model (T=64, d_p=76, 1 draw)", "batch": BATCH,
           "steps": epochs * -(-n // BATCH), "bit-identical": same,
           "hand loop s (cpu)": common.median(times, "hand loop", "cpu")}
    for clock in ("cpu", "wall"):
        row[f"fit / hand loop ({clock})"] = common.ratio(times, "estimator", "hand loop", clock)
    common.print_table(f"Estimator fit against the hand loop (median of {repeats})",
                       list(row), [row])
    common.write_json(args, "bench_overhead", {"rows": [row]})


if __name__ == "__main__":
    main()
