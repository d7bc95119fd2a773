"""The selective state-space model of ``ssm``: its fused scan and mambapy's against a plain
one, shapes, what it reads out, the missing extra, saved models, learning."""

import pickle
import sys

import pytest
import torch
import torch.nn.functional as F

from sparse_token_estimators import SparseTokenSSM, make_sparse_selection
from sparse_token_estimators.ssm import (
    SelectiveSSM,
    require_mambapy,
    selective_scan_fused,
    selective_scan_reference,
)

mamba = pytest.importorskip("mambapy.mamba")


def _scan_inputs(batch, T, E, N, seed, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype)

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


def _mambapys_scan(x, delta, A, B, C, D):
    """``mambapy``'s parallel scan, its own ``MambaBlock.selective_scan`` (which reads
    nothing of the block)."""
    return mamba.MambaBlock.selective_scan(None, x, delta, A, B, C, D)


#: the tolerance of the checks, per dtype
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def _run(scan, inputs, needs_grad=None):
    """``scan``'s output and every input's gradient (of a fixed random weighting of y)."""
    leaves = {k: v.clone().requires_grad_(needs_grad is None or k in needs_grad)
              for k, v in inputs.items()}
    y = scan(**leaves)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=y.dtype)
    (y * weights).sum().backward()
    return y.detach(), {k: v.grad for k, v in leaves.items()}


def _assert_same(got, expected, tol):
    (y, grads), (y_expected, grads_expected) = got, expected
    torch.testing.assert_close(y, y_expected, rtol=tol, atol=tol)
    for name, grad in grads_expected.items():
        if grad is None:
            assert grads[name] is None, name
        else:
            torch.testing.assert_close(grads[name], grad, rtol=tol, atol=tol, msg=name)


# -- the scans against the recurrence --------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 7, 16, 33])
def test_mambapys_parallel_scan_is_the_recurrence_outputs_and_gradients(T):
    inputs = _scan_inputs(3, T, 6, 5, seed=T)
    _assert_same(_run(_mambapys_scan, inputs), _run(selective_scan_reference, inputs), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("T", [1, 2, 7, 16, 33, 67])
def test_the_fused_scan_is_the_recurrence_and_mambapys_scan_outputs_and_gradients(T, dtype):
    # T = 1, odd lengths, lengths that are not a power of two (mambapy's pads to one)
    inputs = _scan_inputs(3, T, 6, 5, seed=T, dtype=dtype)
    fused = _run(selective_scan_fused, inputs)
    assert fused[0].dtype == dtype and all(g.dtype == dtype for g in fused[1].values())
    _assert_same(fused, _run(selective_scan_reference, inputs), TOLERANCE[dtype])
    _assert_same(fused, _run(_mambapys_scan, inputs), TOLERANCE[dtype])


def test_the_fused_scan_passes_gradcheck():
    inputs = _scan_inputs(2, 5, 3, 2, seed=0, dtype=torch.float64)
    leaves = tuple(inputs[k].clone().requires_grad_() for k in ("x", "delta", "A", "B", "C", "D"))
    assert torch.autograd.gradcheck(selective_scan_fused, leaves)


@pytest.mark.parametrize("needs_grad", [{"x"}, {"delta"}, {"A", "D"}, {"B", "C"}, {"x", "A"}])
def test_the_fused_scan_gives_the_gradients_asked_for_and_no_others(needs_grad):
    inputs = _scan_inputs(2, 9, 4, 3, seed=1, dtype=torch.float64)
    got = _run(selective_scan_fused, inputs, needs_grad)
    assert {k for k, g in got[1].items() if g is not None} == needs_grad
    _assert_same(got, _run(selective_scan_reference, inputs, needs_grad), 1e-10)


def test_the_fused_scan_takes_strided_and_mixed_precision_inputs():
    # as mambapy passes them: B and C slices of one projection, x a transposed
    # convolution output; A in float32 beside float64 inputs
    generator = torch.Generator().manual_seed(2)
    batch, T, E, N = 3, 8, 4, 2
    xBC = torch.randn(batch, T, 2 * N + E, generator=generator, dtype=torch.float64)
    base = dict(x=torch.randn(batch, E, T, generator=generator, dtype=torch.float64),
                delta=F.softplus(torch.randn(batch, T, E, generator=generator,
                                             dtype=torch.float64)),
                A=-torch.rand(E, N, generator=generator) - 0.1, xBC=xBC,
                D=torch.randn(E, generator=generator, dtype=torch.float64))

    def split(scan):
        def run(x, delta, A, xBC, D):
            B, C, _ = torch.split(xBC, [N, N, E], dim=-1)
            assert not B.is_contiguous() and not x.transpose(1, 2).is_contiguous()
            return scan(x.transpose(1, 2), delta, A, B, C, D)
        return run

    got = _run(split(selective_scan_fused), base)
    assert got[0].dtype == torch.float64 and got[1]["A"].dtype == torch.float32
    _assert_same(got, _run(split(selective_scan_reference), base), 1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_fused_scan_on_a_gpu_is_the_recurrence():
    inputs = _scan_inputs(4, 19, 8, 4, seed=4, dtype=torch.float64)
    on_gpu = _run(selective_scan_fused, {k: v.cuda() for k, v in inputs.items()})
    on_gpu = on_gpu[0].cpu(), {k: g.cpu() for k, g in on_gpu[1].items()}
    _assert_same(on_gpu, _run(selective_scan_reference, inputs), 1e-10)


# -- the whole model with either scan ---------------------------------------------------


def _model_run(scan, X, swap=None):
    net = _ssm(0, scan=scan)
    if swap is not None:  # an instance attribute shadows mambapy's method
        for block in _blocks(net):
            block.selective_scan = swap
    y = net(X)
    y.pow(2).sum().backward()
    return y.detach(), {k: p.grad for k, p in net.named_parameters()}


@pytest.mark.parametrize("T", [1, 5, 16, 35])
def test_the_whole_model_with_any_scan_gives_the_same_outputs_and_gradients(T):
    X = torch.randn(4, T, 5, generator=torch.Generator().manual_seed(1))
    fused = _model_run("fused", X)
    for other in (_model_run("mambapy", X), _model_run("fused", X, selective_scan_reference)):
        assert fused[1].keys() == other[1].keys()
        _assert_same(fused, other, 1e-5)


def _grad_fns(tensor):
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


def test_the_fused_scan_is_the_default_and_is_what_runs():
    net = SelectiveSSM(4, d_model=8, d_state=4, n_layers=2)
    assert net.scan == "fused"
    assert all(block.selective_scan is selective_scan_fused for block in _blocks(net))
    assert all(block.config.pscan and not block.config.use_cuda for block in _blocks(net))
    X = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(0))
    assert "_SelectiveScanBackward" in _grad_fns(net(X))
    # mambapy's own scan: its class's method again, and no fused scan in the graph
    other = SelectiveSSM(4, d_model=8, d_state=4, n_layers=2, scan="mambapy")
    assert all("selective_scan" not in vars(block) for block in _blocks(other))
    assert "_SelectiveScanBackward" not in _grad_fns(other(X))
    # scoped to our blocks: mambapy's class is untouched
    assert mamba.MambaBlock.selective_scan is not selective_scan_fused
    assert "selective_scan" not in vars(mamba.MambaBlock(mamba.MambaConfig(d_model=8,
                                                                           n_layers=1)))


def test_an_unknown_scan_says_which_there_are():
    with pytest.raises(ValueError, match=r"scan='pscan'.*'fused', 'mambapy'"):
        SelectiveSSM(4, scan="pscan")


# -- saved models ---------------------------------------------------------------------


def test_either_scan_has_the_same_parameters_and_their_weights_load_into_the_other():
    fused, other = _ssm(0), SelectiveSSM(4, d_model=8, d_state=4, n_layers=2, scan="mambapy")
    assert list(fused.state_dict()) == list(other.state_dict())
    other.load_state_dict(fused.state_dict())
    X = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(other(X), fused(X), rtol=1e-5, atol=1e-6)


def test_a_pickle_keeps_its_scan_and_one_from_before_the_fused_scan_gets_it():
    X = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0))
    for scan in ("fused", "mambapy"):
        net = _ssm(0, scan=scan)
        loaded = pickle.loads(pickle.dumps(net))
        assert loaded.scan == scan
        assert ("selective_scan" in vars(_blocks(loaded)[0])) == (scan == "fused")
        torch.testing.assert_close(loaded(X), net(X), rtol=0, atol=0)
    # pickled before the fused scan existed: no scan attribute, mambapy's method
    old = _ssm(0, scan="mambapy")
    del old.scan
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.scan == "fused"
    assert all(block.selective_scan is selective_scan_fused for block in _blocks(loaded))
    torch.testing.assert_close(loaded(X), old(X), rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize("name, value", [("expand", 0), ("d_conv", 0), ("expand", 1.5),
                                         ("d_conv", -1)])
def test_a_convolution_width_or_expansion_below_one_is_refused_naming_it(name, value):
    X, y = make_sparse_selection(32, 6, 3, n_selected=2, random_state=0)
    est = SparseTokenSSM(d_model=8, d_state=4, max_epochs=1, **{f"module__{name}": value})
    with pytest.raises(ValueError, match=rf"{name}={value!r} is not allowed: {name} is .*an "
                                         rf"integer >= 1.*SparseTokenSSM\(module__{name}=2\)"):
        est.fit(X, y)
