import pytest
import torch

from variants.networks import _StackedMLP, member_norm, mlp_forward, stacked_matmul


@pytest.mark.parametrize(
    "m, k, n",
    [(256, 256, 1), (256, 256, 2), (256, 4, 256), (256, 256, 8), (256, 1, 256), (1, 256, 2), (32, 32, 32), (3, 5, 7)],
)
def test_stacked_matmul_is_the_product_in_every_orientation(m, k, n):
    gen = torch.Generator().manual_seed(m * 1000 + k * 10 + n)
    a, b = (
        torch.randn(3, m, k, generator=gen, dtype=torch.float64),
        torch.randn(3, k, n, generator=gen, dtype=torch.float64),
    )
    out = stacked_matmul(a, b)
    assert out.shape == (3, m, n)
    expected = torch.stack([a[i] @ b[i] for i in range(3)])
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


# Small widths (gradcheck builds full Jacobians) that take each branch: ragged outputs, a ragged input
# needing a gradient, all widths whole vectors, a ragged hidden layer, and a ragged batch.
@pytest.mark.parametrize(
    "batch, sizes", [(32, [5, 32, 32, 1]), (32, [4, 32, 2]), (16, [16, 16, 16]), (32, [3, 20, 32, 2]), (1, [32, 32, 8])]
)
def test_stacked_mlp_gradients_match_finite_differences(batch, sizes):
    gen = torch.Generator().manual_seed(batch + sum(sizes))
    x = torch.randn(2, batch, sizes[0], generator=gen, dtype=torch.float64, requires_grad=True)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [
            torch.randn(2, fan_in, fan_out, generator=gen, dtype=torch.float64, requires_grad=True),
            torch.randn(2, 1, fan_out, generator=gen, dtype=torch.float64, requires_grad=True),
        ]
    assert torch.autograd.gradcheck(_StackedMLP.apply, (None, x, *params))


def test_mlp_input_gradient_through_frozen_weights():
    # As the actor loss through a frozen critic: a gradient for the input only.
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 4, generator=gen, requires_grad=True)
    params = [
        torch.randn(2, 4, 16, generator=gen),
        torch.randn(2, 1, 16, generator=gen),
        torch.randn(2, 16, 1, generator=gen),
        torch.randn(2, 1, 1, generator=gen),
    ]
    out = mlp_forward(params, x)
    (grad_x,) = torch.autograd.grad(out.sum(), [x])
    h = torch.relu(torch.baddbmm(params[1], x, params[0]))
    expected = torch.autograd.grad(torch.baddbmm(params[3], h, params[2]).sum(), [x])[0]
    torch.testing.assert_close(grad_x, expected)


def test_mlp_forward_and_gradients_equal_baddbmm_autograd():
    gen = torch.Generator().manual_seed(0)
    sizes = [4, 256, 256, 1]  # a critic: ragged input and output layers, wide hidden layer
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [
            torch.randn(2, fan_in, fan_out, generator=gen) / fan_in**0.5,
            torch.randn(2, 1, fan_out, generator=gen),
        ]
    params = [p.requires_grad_() for p in params]
    x = torch.randn(2, 256, 4, generator=gen, requires_grad=True)

    def plain(ps, inp):
        h = inp
        for i in range(0, len(ps), 2):
            h = torch.baddbmm(ps[i + 1], h, ps[i])
            if i < len(ps) - 2:
                h = torch.relu(h)
        return h

    out = mlp_forward(params, x)
    grads = torch.autograd.grad(out.square().sum(), [x, *params])
    ref_out = plain(params, x)
    ref_grads = torch.autograd.grad(ref_out.square().sum(), [x, *params])
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_member_norm_is_each_members_norm_over_all_tensors():
    # member 0: entries 3, 4 and 12 -> 13; member 1: 0, 0 and 5 -> 5
    a = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    b = torch.tensor([[[12.0]], [[5.0]]])
    torch.testing.assert_close(member_norm([a, b], 2), torch.tensor([13.0, 5.0]))
