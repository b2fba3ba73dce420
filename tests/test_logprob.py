import math

import numpy as np
import pytest
import torch

from variants.logprob import gaussian_log_prob, tanh_log_abs_det_jacobian


def exact_log_one_minus_tanh_sq(u: np.ndarray) -> np.ndarray:
    # log(1 - tanh(u)^2) = log(sech(u)^2) = -2 log cosh(u), exact in float64 for |u| <= 20.
    return -2.0 * np.log(np.cosh(u.astype(np.float64)))


def test_softplus_form_matches_float64_reference_up_to_20():
    u = np.linspace(-20, 20, 4001, dtype=np.float32)
    got = tanh_log_abs_det_jacobian(torch.from_numpy(u)[:, None], "softplus").numpy()
    np.testing.assert_allclose(got, exact_log_one_minus_tanh_sq(u), rtol=0, atol=1e-5)


def test_softplus_form_finite_at_50():
    got = tanh_log_abs_det_jacobian(torch.tensor([[50.0], [-50.0]]), "softplus")
    assert torch.isfinite(got).all()
    np.testing.assert_allclose(got.numpy(), [2 * (math.log(2) - 50)] * 2, rtol=1e-6)


def test_naive_form_agrees_for_small_u():
    u = np.linspace(-3, 3, 601, dtype=np.float32)
    got = tanh_log_abs_det_jacobian(torch.from_numpy(u)[:, None], "naive").numpy()
    np.testing.assert_allclose(got, exact_log_one_minus_tanh_sq(u), rtol=0, atol=1e-3)


@pytest.mark.parametrize("u", [10.0, 15.0, 20.0, -12.0, 50.0])
def test_naive_form_floors_at_log_eps(u):
    # float32 tanh rounds to exactly +-1 here, so the naive form returns log(0 + eps).
    got = tanh_log_abs_det_jacobian(torch.tensor([[u]]), "naive", eps=1e-6).item()
    assert got == pytest.approx(math.log(1e-6), abs=1e-6)
    assert exact_log_one_minus_tanh_sq(np.array([u])).item() < math.log(1e-6) - 4  # the truth is far below


def test_naive_scaled_puts_scale_inside_log():
    u = torch.tensor([[0.3, -1.2]])
    a = torch.tanh(u)
    scale = torch.tensor([2.0, 0.5])
    expected = torch.log(scale * (1 - a**2) + 1e-6).sum(-1)
    got = tanh_log_abs_det_jacobian(u, "naive-scaled", scale=scale)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(
        tanh_log_abs_det_jacobian(u, "naive-scaled", scale=1.0), tanh_log_abs_det_jacobian(u, "naive")
    )


def test_sums_over_last_axis():
    u = torch.tensor([[[0.5, 1.0, -2.0]]])
    per = -2 * np.log(np.cosh([0.5, 1.0, -2.0]))
    assert tanh_log_abs_det_jacobian(u, "softplus").shape == (1, 1)
    assert tanh_log_abs_det_jacobian(u, "softplus").item() == pytest.approx(per.sum(), abs=1e-5)


def test_unknown_form_names_the_valid_ones():
    with pytest.raises(ValueError, match="softplus, naive, naive-scaled"):
        tanh_log_abs_det_jacobian(torch.zeros(1, 1), "exact")


def test_gaussian_log_prob_matches_torch_normal():
    noise = torch.tensor([[0.3, -1.1]])
    log_std = torch.tensor([[-0.5, 0.2]])
    mu = torch.tensor([[0.1, 0.4]])
    u = mu + log_std.exp() * noise
    expected = torch.distributions.Normal(mu, log_std.exp()).log_prob(u).sum(-1)
    torch.testing.assert_close(gaussian_log_prob(noise, log_std), expected)
