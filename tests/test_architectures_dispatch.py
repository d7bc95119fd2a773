"""The architectures' searches go side by side as far as their dependencies allow, and ask
for the very fits they asked for one after another (the third set's records stay valid)."""

import hashlib
import math
import zlib
from dataclasses import replace

import pytest

from sparse_token_estimators.reproduce import SCALES, SMOKE
from sparse_token_estimators.reproduce._architectures import EXPERIMENT, more_steps_fits
from sparse_token_estimators.reproduce._models import query_rivals
from sparse_token_estimators.reproduce._dispatch import SimulatedExecutor, dispatch
from sparse_token_estimators.reproduce._plan import synthetic_r2
from sparse_token_estimators.reproduce._progress import Progress


def made_up(config, fit):
    """A made-up validation R^2, deterministic: each (model, T) crosses the target at its
    own width (half of it with more steps), the rates a little apart."""
    crossing = 2 + zlib.crc32(f"{fit.model}/{fit.seq_len}".encode()) % 10
    if fit.n_train and fit.n_train > config.query_n_train:
        crossing //= 2
    return (0.9 if fit.width >= crossing else 0.5) + 0.01 * (zlib.crc32(
        repr(fit.lr).encode()) % 3)


def asked(config, n_workers, score):
    """The (fit, seed) pairs the architectures' searches ask for, driven by ``score`` on
    ``n_workers`` simulated workers (each job lasting its cost model's seconds)."""
    def job(config, members):
        return [(f, s, {"val_r2": score(config, f), "test_r2": math.nan,
                        "val_loss": math.nan}) for f, s, _ in members]

    records = {}
    pool = SimulatedExecutor(n_workers, lambda config, members: sum(
        f.cost(config) for f, _, _ in members))
    found = dispatch(config, [], [EXPERIMENT], records, {}, Progress(0, enabled=False),
                     executor=pool, n_workers=n_workers, job=job)
    return set(records), found["architectures"], pool.now


def digest(pairs):
    keys = sorted(repr(pair) for pair in pairs)
    return len(keys), hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]


#: the fits of the searches one after another (the rivals after every encoder at every T,
#: each model's T one after another), as main asked for them before this change
#: (6956dac): SMOKE with ``made_up``; the paper's sizes with ``synthetic_r2``
BEFORE = {"smoke": (259, "6c6aeb857e5572ee"), "paper": (1860, "c6ece736f94411a4")}


@pytest.mark.parametrize("n_workers", [1, 3, 16])
def test_the_searches_ask_for_the_same_fits_whatever_the_workers(n_workers):
    pairs, found, _ = asked(replace(SMOKE, experiments=("architectures",)), n_workers,
                            made_up)
    assert digest(pairs) == BEFORE["smoke"]
    # the rivals' searches did find widths (their start from the T before is exercised)
    assert any(o["width"] for T, by in found.items() for m, o in by.items()
               if m in ("query_gru", "query_mamba"))


def test_the_paper_scale_asks_for_the_third_sets_fits_and_goes_faster_on_more_workers():
    config = SCALES["architectures-paper"]
    assert config.rival_more_steps == 4
    pairs, found, wall_64 = asked(replace(config, rival_more_steps=0), 64, synthetic_r2)
    assert digest(pairs) == BEFORE["paper"]
    _, _, wall_2 = asked(replace(config, rival_more_steps=0), 2, synthetic_r2)
    assert wall_64 < wall_2 / 8


def test_more_steps_fits_are_the_rivals_at_twice_the_encoder_with_four_times_the_steps():
    config = replace(SMOKE, experiments=("architectures",), rival_more_steps=4)
    pairs, found, _ = asked(config, 3, made_up)
    before, _, _ = asked(replace(config, rival_more_steps=0), 3, made_up)
    extra = {fit for fit, _ in pairs - before}
    assert before <= pairs and extra
    T0 = config.query_seq_lens()[0]
    expected = {f for m in query_rivals() for f in more_steps_fits(config, found, m)}
    assert extra == expected
    for fit in expected:
        assert fit.seq_len == T0 and fit.n_train == 4 * config.query_n_train
    assert more_steps_fits(replace(config, rival_more_steps=0), found, "query_gru") == []
