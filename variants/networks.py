"""Member-stacked MLPs: the parameters of M independent networks stacked along a leading member axis.

A layer's weight has shape (M, in, out) and its bias (M, 1, out); a forward pass is one batched matmul
per layer (`torch.baddbmm`), so M networks cost about one on a GPU and share nothing: member m's output
depends only on member m's parameters and inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

Params = list[torch.Tensor]  # [W0, b0, W1, b1, ...]

# CPU elementwise kernels (Adam's step, lerp) run a vectorised loop over a tensor and a scalar loop
# over its last few elements, and the two loops round differently (where they part: docs/measurements.md,
# networks.py). Which loop a member's slice of a stacked tensor gets would then depend on how many
# members are stacked, unless every member's slice is a whole number of vector chunks: 64 floats is two
# 512-bit vectors, twice over.
MEMBER_ALIGN = 64


class MemberParams:
    """Stacked parameters of M networks (S members x copies), as a forward pass and an optimizer see them.

    `tensors()` gives one (M, ...) tensor per parameter, the layout `mlp_forward` takes. `leaves()`
    gives what an optimizer steps: a tensor whose size per member is a multiple of MEMBER_ALIGN is its
    own leaf; any other (output biases, log-alpha) is held as one leaf per member and concatenated by
    `tensors()`, so that each member's values are updated by exactly the arithmetic they get when the
    member is trained alone. With one member every tensor is its own leaf and `tensors()` copies nothing.
    `split=False` keeps every tensor one leaf whatever its size: an optimizer step then writes the very
    tensors a live graph saved, so autograd's in-place check sees it (see learner.STEPS_UNDER_LIVE_GRAPH).
    """

    def __init__(self, stacked: Sequence[torch.Tensor], members: int, requires_grad: bool = True, split: bool = True):
        self.members = members
        self._parts: list[list[torch.Tensor]] = []
        for t in stacked:
            t = t.detach()
            if members == 1 or not split or (t.numel() // members) % MEMBER_ALIGN == 0:
                parts = [t.clone()]
            else:
                parts = [c.clone() for c in t.chunk(members)]
            self._parts.append([p.requires_grad_(requires_grad) for p in parts])

    def tensors(self) -> Params:
        """Per parameter, the (M, ...) tensor of all members. Where a parameter is split this is a new
        concatenation, so in-place writes to it are lost: write with `copy_`."""
        return [parts[0] if len(parts) == 1 else torch.cat(parts) for parts in self._parts]

    def leaves(self) -> list[torch.Tensor]:
        return [p for parts in self._parts for p in parts]

    def grads(self) -> list[torch.Tensor]:
        """Per parameter with a gradient, the (M, ...) gradient of its leaves."""
        return [
            parts[0].grad if len(parts) == 1 else torch.cat([p.grad for p in parts])
            for parts in self._parts
            if all(p.grad is not None for p in parts)
        ]

    @torch.no_grad()
    def copy_(self, stacked: Sequence[torch.Tensor]) -> None:
        """Overwrite the values with (M, ...) tensors shaped like `tensors()`."""
        for parts, t in zip(self._parts, stacked, strict=True):
            for p, chunk in zip(parts, t.chunk(len(parts)), strict=True):
                p.copy_(chunk)

    def detached_copy(self) -> MemberParams:
        """Same values, split the same way, outside autograd (a target network)."""
        return MemberParams([t.detach() for t in self.tensors()], self.members, requires_grad=False)


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
    split: bool = True,
) -> MemberParams:
    """Initialise stacked MLPs with layer widths `sizes` (input, hidden..., output).

    Member m's `copies_per_member` networks are drawn from `generators[m]` (a CPU generator), one
    network after the other, so a member's initial weights do not depend on how many members are
    stacked. Returns them as MemberParams whose `tensors()` have shapes (M, in, out) and (M, 1, out),
    M = len(generators) * copies_per_member (float32, requiring grad); `split` as MemberParams takes it.
    """
    make = INITIALIZERS[init]
    per_network: list[list[torch.Tensor]] = []
    for gen in generators:
        for _ in range(copies_per_member):
            layers: list[torch.Tensor] = []
            for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
                layers.extend(make(fan_in, fan_out, gen))
            per_network.append(layers)
    stacked = [
        torch.stack([net[i] for net in per_network]).to(device=device, dtype=torch.float32)
        for i in range(len(per_network[0]))
    ]
    return MemberParams(stacked, len(generators), split=split)


# CPU GEMM kernels are slow when the output has a number of columns that is not a multiple of 16 floats
# (one vector register), several times slower than the transposed product (docs/measurements.md,
# networks.py). Those are the layers with one or two outputs (Q-values, the policy's mean and log-std)
# and their gradients; computing the transpose there is the same sum of products.
_VECTOR_FLOATS = 16


def _ragged(width: int) -> bool:
    return width % _VECTOR_FLOATS != 0


def _transpose_is_faster(rows: int, cols: int) -> bool:
    """Whether a (rows x cols) product output is faster computed as its transpose."""
    return _ragged(cols) and not _ragged(rows)


def stacked_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for stacked matrices, (M, m, k) @ (M, k, n) -> (M, m, n), in the faster orientation.

    An outer product (k = 1) is a broadcast multiply; a product whose output width n is ragged and whose
    height m is not is computed as (b^T a^T)^T (the result is then a transposed view).
    """
    if b.shape[-2] == 1:
        return a * b
    if _transpose_is_faster(a.shape[-2], b.shape[-1]):
        return torch.bmm(b.mT, a.mT).mT
    return torch.bmm(a, b)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x @ W + bias for stacked layers, x (M, B, in), W (M, in, out), bias (M, 1, out), in the faster
    orientation (the result is then a transposed view)."""
    if _transpose_is_faster(x.shape[-2], weight.shape[-1]):
        return torch.baddbmm(bias.mT, weight.mT, x.mT).mT
    return torch.baddbmm(bias, x, weight)


def _relu_backward_(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    # What autograd runs for relu (threshold_backward on the relu's output), written into `grad`.
    return torch.ops.aten.threshold_backward.grad_input(grad, output, 0, grad_input=grad)


# Mixed precision. On a CPU with AVX512_BF16 (oneDNN) a square hidden-layer product is about twice as
# fast in bfloat16 as in float32, but every bfloat16 product also pays a fixed cost: the input layers'
# narrow products (3 or 4 inputs) are slower in bfloat16, and the output layers' (1 or 2 outputs)
# barely faster, less than the cast of their input costs (docs/measurements.md, networks.py). Hence only the hidden-to-hidden layers take the precision's dtype; the
# input and output layers, and with them the Q-values, means and log-stds the losses read, stay float32
# products. Master weights, their gradients and Adam's state are float32.
PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def layer_dtypes(precision: str, layers: int) -> tuple[torch.dtype, ...] | None:
    """Per layer of a `layers`-layer MLP, the dtype its products run in; None when that is float32
    everywhere (the float32 path, which casts nothing)."""
    hidden = PRECISIONS[precision]
    if hidden == torch.float32 or layers < 3:
        return None
    return (torch.float32, *[hidden] * (layers - 2), torch.float32)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # `t.to(dtype)` would return t too, but through the dispatcher: ~1 us per call, dozens per update.
    return t if t.dtype == dtype else t.to(dtype)


def _layers(
    params: Sequence[torch.Tensor], x: torch.Tensor, dtypes: Sequence[torch.dtype] | None = None
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """The MLP's output; each layer's input (x, then the ReLU outputs, computed in place) and weight,
    in the layer's dtype (`layer_dtypes`; None: the parameters' own); and each ReLU's output.

    A cast is exact per element and commutes with ReLU, so where it happens changes no value: each ReLU
    runs in the wider dtype of its two layers, because CPU elementwise kernels are slower on bfloat16
    than on float32 (ReLU 13 us against 2 us on a 256 x 256 tensor, its backward 19 against 11).
    Without `dtypes` each ReLU's output is the next layer's input itself.
    """
    last = len(params) // 2 - 1
    inputs, weights, relus = [], [], []
    for layer in range(last + 1):
        weight, bias = params[2 * layer], params[2 * layer + 1]
        if dtypes is not None:
            x, weight, bias = _as(x, dtypes[layer]), _as(weight, dtypes[layer]), _as(bias, dtypes[layer])
        inputs.append(x)
        weights.append(weight)
        x = _linear(x, weight, bias)
        if layer < last:
            if dtypes is not None:
                x = _as(x, torch.promote_types(dtypes[layer], dtypes[layer + 1]))
            x = x.relu_()
            relus.append(x)
    return x, inputs, weights, relus


class _StackedMLP(torch.autograd.Function):
    """A whole ReLU MLP as one autograd node: forward(dtypes, x, W0, b0, W1, b1, ...) -> (M, B, out).

    The products and elementwise ops are those of `baddbmm` and `relu` under autograd, with each
    product in the orientation `stacked_matmul` picks; the ReLUs run in place (forward and backward).
    One node instead of two per layer saves the autograd engine's per-node work, and only the gradients
    asked for are computed (a frozen critic gets none for its weights). With `dtypes` (`layer_dtypes`)
    each layer's forward and both backward products run in its dtype, each ReLU's backward in its
    forward's dtype, and the gradients come back in the parameters' and the input's dtypes (bias
    gradients summed in that dtype from the incoming gradient before any cast).
    """

    @staticmethod
    def forward(ctx, dtypes: Sequence[torch.dtype] | None, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        out, inputs, weights, relus = _layers(params, x, dtypes)
        ctx.mixed = dtypes is not None
        ctx.x_dtype, ctx.param_dtype = x.dtype, params[0].dtype
        # Without dtypes the ReLU outputs are inputs[1:] already.
        ctx.save_for_backward(*inputs, *weights, *(relus if ctx.mixed else ()))
        return _as(out, ctx.param_dtype) if ctx.mixed else out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        saved = ctx.saved_tensors
        layers = (len(saved) + 1) // 3 if ctx.mixed else len(saved) // 2
        inputs, weights = saved[:layers], saved[layers : 2 * layers]
        relus = saved[2 * layers :] if ctx.mixed else inputs[1:]
        need = ctx.needs_input_grad  # (dtypes, x, W0, b0, W1, b1, ...)
        grad_params: list[torch.Tensor | None] = [None] * (2 * layers)
        grad_x = None
        for layer in reversed(range(layers)):
            if ctx.mixed:
                if need[3 + 2 * layer]:
                    grad_params[2 * layer + 1] = grad.sum(dim=1, keepdim=True, dtype=ctx.param_dtype)
                grad = _as(grad, weights[layer].dtype)
            elif need[3 + 2 * layer]:
                grad_params[2 * layer + 1] = grad.sum(dim=1, keepdim=True)
            if need[2 + 2 * layer]:
                grad_params[2 * layer] = stacked_matmul(inputs[layer].mT, grad)
            if layer > 0:
                grad_input = stacked_matmul(grad, weights[layer].mT)
                relu = relus[layer - 1]
                grad = _relu_backward_(_as(grad_input, relu.dtype) if ctx.mixed else grad_input, relu)
            elif need[1]:
                grad_x = stacked_matmul(grad, weights[0].mT)
        if ctx.mixed:
            grad_params = [None if g is None else _as(g, ctx.param_dtype) for g in grad_params]
            grad_x = None if grad_x is None else _as(grad_x, ctx.x_dtype)
        return (None, grad_x, *grad_params)


def mlp_forward(params: Sequence[torch.Tensor], x: torch.Tensor, precision: str = "fp32") -> torch.Tensor:
    """ReLU MLP forward. x: (M, B, in) -> (M, B, out), in the parameters' dtype. `precision` is a key
    of PRECISIONS: the dtype of the hidden-to-hidden products (see `layer_dtypes`)."""
    dtypes = layer_dtypes(precision, len(params) // 2)
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
        return _StackedMLP.apply(dtypes, x, *params)
    out = _layers(params, x, dtypes)[0]
    return out if dtypes is None else _as(out, params[0].dtype)


def _member_rows(tensors: Sequence[torch.Tensor], members: int) -> torch.Tensor:
    # One (members, total) matrix, so that a per-member reduction is one kernel, not one per tensor.
    return torch.cat([t.reshape(members, -1) for t in tensors], dim=1)


def member_norm(tensors: Sequence[torch.Tensor], members: int) -> torch.Tensor:
    """Per-member Euclidean norm over stacked tensors whose leading axis is a multiple of `members`.

    Shapes: each tensor (members * k, ...); returns (members,).
    """
    return torch.linalg.vector_norm(_member_rows(tensors, members), dim=1)


def member_nonfinite(tensors: Sequence[torch.Tensor], members: int) -> torch.Tensor:
    """Per-member count of non-finite entries; returns (members,) float."""
    return (~torch.isfinite(_member_rows(tensors, members))).sum(dim=1).float()
