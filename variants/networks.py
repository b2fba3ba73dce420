"""Member-stacked MLPs: the parameters of M independent networks stacked along a leading member axis.

A layer's weight has shape (M, in, out) and its bias (M, 1, out); a forward pass is one batched matmul
per layer (`torch.baddbmm`), so M networks cost about one on a GPU and share nothing: member m's output
depends only on member m's parameters and inputs.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

Params = list[torch.Tensor]  # [W0, b0, W1, b1, ...]


def _torch_default(fan_in: int, fan_out: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    # nn.Linear's default: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), bias alike.
    bound = 1.0 / math.sqrt(fan_in)
    weight = (torch.rand(fan_in, fan_out, generator=gen, dtype=torch.float64) * 2 - 1) * bound
    bias = (torch.rand(1, fan_out, generator=gen, dtype=torch.float64) * 2 - 1) * bound
    return weight, bias


def _xavier(fan_in: int, fan_out: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    weight = (torch.rand(fan_in, fan_out, generator=gen, dtype=torch.float64) * 2 - 1) * bound
    return weight, torch.zeros(1, fan_out, dtype=torch.float64)


INITIALIZERS: dict[str, Callable[[int, int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]] = {
    "torch-default": _torch_default,
    "xavier": _xavier,
}


def init_mlp(
    sizes: Sequence[int],
    generators: Sequence[torch.Generator],
    init: str,
    copies_per_member: int = 1,
    device: torch.device | str = "cpu",
) -> Params:
    """Initialise stacked MLPs with layer widths `sizes` (input, hidden..., output).

    Member m's `copies_per_member` networks are drawn from `generators[m]` (a CPU generator), one
    network after the other, so a member's initial weights do not depend on how many members are
    stacked. Returns leaf tensors (float32, requires_grad) of shape (M, in, out) and (M, 1, out),
    M = len(generators) * copies_per_member.
    """
    make = INITIALIZERS[init]
    per_network: list[list[torch.Tensor]] = []
    for gen in generators:
        for _ in range(copies_per_member):
            layers: list[torch.Tensor] = []
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
                layers.extend(make(fan_in, fan_out, gen))
            per_network.append(layers)
    return [
        torch.stack([net[i] for net in per_network]).to(device=device, dtype=torch.float32).requires_grad_()
        for i in range(len(per_network[0]))
    ]


def mlp_forward(params: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """ReLU MLP forward. x: (M, B, in) -> (M, B, out)."""
    last = len(params) // 2 - 1
    for layer in range(last + 1):
        x = torch.baddbmm(params[2 * layer + 1], x, params[2 * layer])
        if layer < last:
            x = torch.relu(x)
    return x


def member_sq_norm(tensors: Sequence[torch.Tensor], members: int) -> torch.Tensor:
    """Per-member sum of squares over stacked tensors whose leading axis is a multiple of `members`.

    Shapes: each tensor (members * k, ...); returns (members,).
    """
    total = torch.zeros(members, device=tensors[0].device)
    for t in tensors:
        total = total + t.reshape(members, -1).pow(2).sum(dim=1)
    return total


def member_nonfinite(tensors: Sequence[torch.Tensor], members: int) -> torch.Tensor:
    """Per-member count of non-finite entries; returns (members,) float."""
    total = torch.zeros(members, device=tensors[0].device)
    for t in tensors:
        total = total + (~torch.isfinite(t.reshape(members, -1))).sum(dim=1)
    return total
