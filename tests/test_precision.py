"""The bf16 precision: which products run in bfloat16, how close its losses and gradients are to fp32's,
and that members stay independent. The fp32 path's guard is the check baseline (`harness check`)."""

import dataclasses

import pytest
import torch
from helpers import ACT, all_params, filled_buffer, make_learner, tiny_spec, train_batched_and_alone
from torch.utils._python_dispatch import TorchDispatchMode

from variants import CATALOG, REFERENCE
from variants.learner import actor_loss, critic_loss
from variants.networks import _StackedMLP, layer_dtypes, mlp_forward

# bfloat16 keeps 8 significant bits: one rounding is off by up to 2^-8 = 0.39%. The losses, targets and
# log-probs are float32 computations on activations that passed through a bfloat16 layer, so they stay
# within a few roundings of fp32's (relative Euclidean norm of the difference, over a batch's values:
# at most 0.07% over 12 draws of weights, widths 64 and 256, 2 and 3 hidden layers). Gradients pass through bfloat16 twice more (the incoming
# gradient and the product's output are rounded) and are sums whose terms cancel, so their relative
# error is larger: measured 0.4-8% per tensor (relative Euclidean norm), as with PyTorch's own
# autocast(bfloat16) on an nn.Linear MLP of the same shape (0.7-5%).
VALUE_REL_NORM = 2e-3
GRAD_REL_NORM = 0.12


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """|got - expected| / |expected| in the Euclidean norm over all elements (a loss: one element)."""
    return ((got - expected).norm() / expected.norm()).item()


def _mid_spec(**changes):
    # Wider than the tiny spec so the hidden product sums 64 terms, as a real layer sums many.
    return dataclasses.replace(REFERENCE, **({"hidden_sizes": (64, 64), "batch_size": 64} | changes))


def test_catalog_bf16_changes_only_the_precision():
    assert CATALOG["bf16"].spec.differences(REFERENCE) == {"precision": ("bf16", "fp32")}


def test_bf16_with_one_hidden_layer_is_refused():
    with pytest.raises(ValueError, match="precision=bf16 needs at least two hidden layers"):
        dataclasses.replace(REFERENCE, precision="bf16", hidden_sizes=(1024,))


def test_only_hidden_to_hidden_layers_take_the_precision():
    assert layer_dtypes("fp32", 3) is None and layer_dtypes("bf16", 2) is None  # one hidden layer: none inside
    assert layer_dtypes("bf16", 3) == (torch.float32, torch.bfloat16, torch.float32)
    assert layer_dtypes("bf16", 4) == (torch.float32, torch.bfloat16, torch.bfloat16, torch.float32)


class _Products(TorchDispatchMode):
    """Records (dtype, sorted operand dims) of every batched matrix product dispatched."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.bmm, torch.ops.aten.baddbmm):
            a, b = args[-2], args[-1]
            self.seen.append((a.dtype, tuple(sorted((a.shape[-2], a.shape[-1], b.shape[-1])))))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("precision, hidden_dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_every_hidden_product_of_an_update_runs_in_the_precision_and_no_other(precision, hidden_dtype):
    spec = dataclasses.replace(REFERENCE, hidden_sizes=(48, 48), batch_size=32, precision=precision)
    learner, buf = make_learner(spec), filled_buffer(1)
    batch = buf.sample(spec.batch_size, learner.generators)
    with _Products() as products:
        learner.update(batch)
    hidden = [dtype for dtype, dims in products.seen if dims == (32, 48, 48)]
    others = [dtype for dtype, dims in products.seen if dims != (32, 48, 48)]
    # Forward: next-state policy, target critics, critics, policy, critics on its actions (5); backward:
    # the critics' weight and input gradients, the critics' input gradient in the actor loss, the
    # policy's weight and input gradients (5).
    assert len(hidden) == 10 and set(hidden) == {hidden_dtype}
    assert others and set(others) == {torch.float32}


def _losses_and_grads(spec, seed):
    learner, buf = make_learner(spec, (seed,)), filled_buffer(1)
    gen = torch.Generator().manual_seed(seed)
    batch = buf.sample(spec.batch_size, [gen])
    noise_next, noise = (
        torch.randn(1, spec.batch_size, ACT, generator=gen),
        torch.randn(1, spec.batch_size, ACT, generator=gen),
    )
    lc, _, target = critic_loss(learner, batch, noise_next)
    grads = list(torch.autograd.grad(lc.sum(), learner.critic_params.leaves()))
    la, pi = actor_loss(learner, batch, noise, [p.detach() for p in learner.critic])
    grads += torch.autograd.grad(la.sum(), learner.actor_params.leaves())
    return [lc, la, target, pi.log_prob], grads


@pytest.mark.parametrize("hidden, seed", [((64, 64), 0), ((64, 64), 1), ((64, 64, 64), 2)])
def test_bf16_losses_and_gradients_equal_fp32_within_bf16_tolerance(hidden, seed):
    values32, grads32 = _losses_and_grads(_mid_spec(hidden_sizes=hidden), seed)
    values16, grads16 = _losses_and_grads(_mid_spec(hidden_sizes=hidden, precision="bf16"), seed)
    for v16, v32 in zip(values16, values32, strict=True):  # critic loss, actor loss, TD targets, log-probs
        assert v16.dtype == torch.float32 and _relative_error(v16, v32) < VALUE_REL_NORM
    assert not torch.equal(values16[0], values32[0])  # the bf16 path really rounded something
    for g16, g32 in zip(grads16, grads32, strict=True):
        assert g16.dtype == torch.float32 and _relative_error(g16, g32) < GRAD_REL_NORM


def test_mixed_node_gradients_equal_autograd_through_the_same_casts():
    # The node's hand-written backward against autograd's derivative of the same mixed forward, written
    # with plain ops. They round differently in one place: autograd sums a bfloat16 layer's bias
    # gradient in bfloat16 (one rounding, up to 2^-8), the node in float32. Elsewhere they agree to
    # float32's last bits; the bf16-vs-fp32 difference here is 0.2-1%.
    gen = torch.Generator().manual_seed(3)
    sizes = [4, 64, 64, 64, 1]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [
            torch.randn(2, fan_in, fan_out, generator=gen) / fan_in**0.5,
            torch.randn(2, 1, fan_out, generator=gen) * 0.1,
        ]
    params = [p.requires_grad_() for p in params]
    x = torch.randn(2, 48, 4, generator=gen, requires_grad=True)
    dtypes = layer_dtypes("bf16", 4)

    def plain(ps, h):
        for layer, dtype in enumerate(dtypes):
            h = torch.baddbmm(ps[2 * layer + 1].to(dtype), h.to(dtype), ps[2 * layer].to(dtype)).float()
            h = torch.relu(h) if layer < len(dtypes) - 1 else h
        return h

    out = _StackedMLP.apply(dtypes, x, *params)
    torch.testing.assert_close(out, plain(params, x), rtol=1e-5, atol=1e-5)
    got = torch.autograd.grad(out.square().sum(), [x, *params])
    expected = torch.autograd.grad(plain(params, x).square().sum(), [x, *params])
    bf16_biases = {
        2 + 2 * layer for layer, dtype in enumerate(dtypes) if dtype == torch.bfloat16
    }  # in (x, W0, b0, ...)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.dtype == torch.float32
        assert _relative_error(g, e) < (2.0**-8 if i in bf16_biases else 1e-5), i


def test_bf16_forward_without_grad_equals_the_node_forward():
    gen = torch.Generator().manual_seed(4)
    params = [
        torch.randn(3, 5, 32, generator=gen),
        torch.randn(3, 1, 32, generator=gen),
        torch.randn(3, 32, 32, generator=gen),
        torch.randn(3, 1, 32, generator=gen),
        torch.randn(3, 32, 2, generator=gen),
        torch.randn(3, 1, 2, generator=gen),
    ]
    x = torch.randn(3, 7, 5, generator=gen)
    with torch.no_grad():
        acted = mlp_forward(params, x, "bf16")
    trained = mlp_forward([p.clone().requires_grad_() for p in params], x, "bf16")
    assert acted.dtype == torch.float32 and torch.equal(acted, trained.detach())
    assert not torch.equal(acted, mlp_forward(params, x, "fp32"))


def test_bf16_keeps_fp32_master_weights_and_adam_state():
    spec = tiny_spec(precision="bf16")
    learner, buf = make_learner(spec, (0, 1)), filled_buffer(2)
    before = [p.detach().clone() for p in all_params(learner)]
    for _ in range(3):
        learner.update(buf.sample(spec.batch_size, learner.generators))
    assert all(p.dtype == torch.float32 for p in all_params(learner))
    for opt in learner.optimizers:
        for state in opt.state.values():
            assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == torch.float32
    assert not any(torch.equal(a, b) for a, b in zip(before[:6], all_params(learner)[:6]))


@pytest.mark.parametrize("order, hidden", [("sequential", (16, 16)), ("policy-first", (32, 32, 32))])
def test_bf16_members_equal_each_seed_trained_alone_bit_for_bit(order, hidden):
    # As the fp32 test in test_learner.py: 9 members put every small stacked tensor past the CPU
    # kernels' vector thresholds; with three hidden layers a ReLU runs between two bfloat16 layers.
    spec = dataclasses.replace(tiny_spec(update_order=order, precision="bf16"), hidden_sizes=hidden)
    seeds = tuple(range(20, 29))
    batched, alone = train_batched_and_alone(spec, seeds, filled_buffer(len(seeds)), 15)
    _, batched_diag = batched.read_diagnostics()
    for m, learner in enumerate(alone):
        for stacked, single in zip(all_params(batched), all_params(learner)):
            k = stacked.shape[0] // len(seeds)
            assert torch.equal(stacked[m * k : (m + 1) * k], single), f"member {m}"
        assert (batched_diag[m] == learner.read_diagnostics()[1][0]).all(), f"member {m} diagnostics"
