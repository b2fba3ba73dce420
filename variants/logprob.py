"""The change-of-variables term of the tanh-squashed Gaussian policy.

For a = tanh(u), u ~ N(mu, sigma), log pi(a|s) = log N(u; mu, sigma) - sum_i log(1 - tanh(u_i)^2)
(Haarnoja et al. 2018, eq. 26). The subtracted sum is where SAC implementations differ; each form is one
pure function of the pre-tanh sample `u`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .spec import LogProbForm

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _softplus_form(u: torch.Tensor, eps: float, scale: float | torch.Tensor) -> torch.Tensor:
    # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)): exact, and finite for any u.
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


def _naive_form(u: torch.Tensor, eps: float, scale: float | torch.Tensor) -> torch.Tensor:
    # float32 tanh rounds to +-1 from |u| ~ 9 on, so this floors at log(eps).
    return torch.log(1.0 - torch.tanh(u).pow(2) + eps)


def _naive_scaled_form(u: torch.Tensor, eps: float, scale: float | torch.Tensor) -> torch.Tensor:
    # The action scale sits inside the log, as in the blog's code; for scale = 1 this is `naive`.
    return torch.log(scale * (1.0 - torch.tanh(u).pow(2)) + eps)


LOG_ABS_DET_FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "softplus": _softplus_form,
    "naive": _naive_form,
    "naive-scaled": _naive_scaled_form,
}


def tanh_log_abs_det_jacobian(
    u: torch.Tensor, form: LogProbForm, eps: float = 1e-6, scale: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Sum over the last axis of the chosen form of log(1 - tanh(u)^2).

    Args:
        u: pre-tanh samples, shape (..., A).
        form: "softplus", "naive" or "naive-scaled".
        eps: the additive epsilon of the naive forms.
        scale: the action scale of "naive-scaled", a float or a tensor broadcastable to (..., A).

    Returns:
        Tensor of shape (...): the term subtracted from the Gaussian log-density.
    """
    try:
        fn = LOG_ABS_DET_FORMS[form]
    except KeyError:
        raise ValueError(f"unknown log-prob form {form!r}; expected one of {', '.join(LOG_ABS_DET_FORMS)}") from None
    return fn(u, eps, scale).sum(dim=-1)


def gaussian_log_prob(noise: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log N(u; mu, sigma) summed over the last axis, for u = mu + sigma * noise.

    Written in terms of the standard-normal `noise` so that (u - mu) / sigma is exact.
    Shapes: noise and log_std (..., A); returns (...).
    """
    return (-0.5 * noise.pow(2) - log_std - LOG_SQRT_2PI).sum(dim=-1)
