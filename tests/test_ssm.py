"""The selective state-space model of ``ssm``: mambapy's scan against a plain one, shapes,
what it reads out, the missing extra, learning."""

import sys

import pytest
import torch
import torch.nn.functional as F

from sparse_token_estimators import SparseTokenSSM, make_sparse_selection
from sparse_token_estimators.ssm import SelectiveSSM, require_mambapy, selective_scan_reference

mamba = pytest.importorskip("mambapy.mamba")


def _scan_inputs(batch, T, E, N, seed):
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    return dict(x=draw(batch, T, E), delta=F.softplus(draw(batch, T, E)),
                A=-torch.exp(draw(E, N)), B=draw(batch, T, N), C=draw(batch, T, N), D=draw(E))


def _ssm(seed, **sizes):
    """A SelectiveSSM with random weights (every parameter redrawn, not the init)."""
    torch.manual_seed(seed)
    net = SelectiveSSM(4, **{"d_model": 8, "d_state": 4, "n_layers": 2, **sizes})
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.copy_(0.5 * torch.randn_like(parameter))
    return net


def _blocks(net):
    return [layer.mixer for layer in net.mamba.layers]


# -- mambapy's parallel scan against the recurrence ------------------------------------


@pytest.mark.parametrize("T", [1, 2, 7, 16, 33])
def test_mambapys_parallel_scan_is_the_recurrence_outputs_and_gradients(T):
    inputs = _scan_inputs(3, T, 6, 5, seed=T)
    results = []
    for scan in (_blocks(_ssm(0))[0].selective_scan, selective_scan_reference):
        leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
        y = scan(**leaves)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results.append((y.detach(), {k: v.grad for k, v in leaves.items()}))
    (y_parallel, grads_parallel), (y_reference, grads_reference) = results
    torch.testing.assert_close(y_parallel, y_reference, rtol=1e-5, atol=1e-5)
    for name in inputs:
        torch.testing.assert_close(grads_parallel[name], grads_reference[name],
                                   rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("T", [5, 16])
def test_the_whole_model_with_either_scan_gives_the_same_outputs_and_gradients(T):
    X = torch.randn(4, T, 5, generator=torch.Generator().manual_seed(1))
    results = []
    for swap in (False, True):
        net = _ssm(0)
        if swap:  # an instance attribute shadows mambapy's method
            for block in _blocks(net):
                block.selective_scan = selective_scan_reference
        y = net(X)
        y.pow(2).sum().backward()
        results.append((y.detach(), {k: p.grad for k, p in net.named_parameters()}))
    (y_parallel, grads_parallel), (y_reference, grads_reference) = results
    torch.testing.assert_close(y_parallel, y_reference, rtol=1e-5, atol=1e-5)
    assert grads_parallel.keys() == grads_reference.keys()
    for name, grad in grads_parallel.items():
        torch.testing.assert_close(grad, grads_reference[name], rtol=1e-5, atol=1e-5, msg=name)


def test_the_reference_scan_is_selective_a_zero_step_keeps_the_state():
    # Delta_t = 0 at a position: exp(0 A) = 1 keeps h, and 0 * B x adds nothing, so with
    # one C for every position and no skip (D = 0) the output repeats, whatever x_t is
    inputs = _scan_inputs(2, 6, 3, 4, seed=0)
    inputs.update(C=inputs["C"][:, :1].expand(-1, 6, -1), D=torch.zeros(3))
    inputs["delta"][:, 3] = 0
    for value in (0.0, 100.0):
        inputs["x"][:, 3] = value
        y = selective_scan_reference(**inputs)
        torch.testing.assert_close(y[:, 3], y[:, 2])
    assert not torch.allclose(y[:, 4], y[:, 3])  # a nonzero step moves it again


# -- the module ---------------------------------------------------------------------


def test_reads_any_length_and_returns_d():
    net = _ssm(0)
    for seq_len in (1, 10, 100):
        X, _ = make_sparse_selection(3, seq_len, 4, 1, random_state=0)
        assert net(torch.as_tensor(X)).shape == (3, 4)


def test_reads_out_the_last_position_and_is_causal():
    net = _ssm(0)
    X = torch.randn(3, 9, 5, generator=torch.Generator().manual_seed(0))
    full = net(X)
    h = net.mamba(net.embed(X))  # (B, T, C)
    torch.testing.assert_close(full, net.head(net.norm(h[:, -1])))
    # causal: the prediction from the first 5 positions ignores what comes after
    changed = X.clone()
    changed[:, 5:] = 0
    torch.testing.assert_close(net.head(net.norm(net.mamba(net.embed(changed))[:, 4])),
                               net.head(net.norm(h[:, 4])))
    assert not torch.allclose(net(X.flip(1)), full)  # the order matters


def test_sizes_reach_mambapy():
    net = SelectiveSSM(4, d_model=12, d_state=3, n_layers=3, d_conv=2, expand=1)
    assert len(net.mamba.layers) == 3
    block = _blocks(net)[0]
    assert block.A_log.shape == (12, 3)  # expand * d_model channels, d_state each
    assert block.conv1d.kernel_size == (2,)
    assert SelectiveSSM(4, n_layers=0)(torch.zeros(2, 3, 5)).shape == (2, 4)


def test_without_mambapy_it_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "mambapy", None)  # import mambapy now fails
    monkeypatch.delitem(sys.modules, "mambapy.mamba", raising=False)
    for build in (require_mambapy, lambda: SelectiveSSM(4), lambda: SparseTokenSSM(d_model=8)):
        with pytest.raises(ImportError, match=r"pip install 'sparse-token-estimators\[ssm\]'"):
            build()


# -- learning -----------------------------------------------------------------------


def test_a_small_ssm_learns_the_indicator_task():
    torch.set_num_threads(1)
    X, y = (torch.as_tensor(a) for a in make_sparse_selection(2000, 8, 4, 2, random_state=0))
    X_test, y_test = (torch.as_tensor(a) for a in make_sparse_selection(400, 8, 4, 2,
                                                                         random_state=1))
    torch.manual_seed(0)
    net = SelectiveSSM(4, d_model=16, d_state=8)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(0)
    for _ in range(8):
        order = torch.randperm(len(X), generator=generator)
        for index in order.split(64):
            loss = F.mse_loss(net(X[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        r2 = 1 - F.mse_loss(net(X_test), y_test) / y_test.var(0).mean()
    assert r2 > 0.8
