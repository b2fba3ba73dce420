"""The learner on a CUDA device, in both precisions. Marked `cuda`: `python -m harness gpu-check` runs
them (`pytest -m cuda`); without CUDA they are skipped. Each test also runs on the CPU, so that its own
logic is exercised on every machine."""

import dataclasses

import numpy as np
import pytest
import torch
from helpers import ACT, OBS, SCALE, train_batched_and_alone

from variants import REFERENCE
from variants.buffer import Batch, ReplayBuffer
from variants.learner import SACLearner, actor_loss, critic_loss

CUDA = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
PRECISIONS = ["fp32", "bf16"]


def _spec(precision: str, **changes):
    return dataclasses.replace(
        REFERENCE, **({"hidden_sizes": (64, 64), "batch_size": 64, "precision": precision} | changes)
    )


def _buffer(members: int, device: str, n: int = 300, seed: int = 5) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(members, n, OBS, ACT, device)
    for _ in range(n):
        buf.add(
            rng.normal(size=(members, OBS)),
            rng.uniform(-1, 1, size=(members, ACT)),
            rng.normal(size=members),
            rng.normal(size=(members, OBS)),
            rng.random(members) < 0.1,
        )
    return buf


def _params(learner: SACLearner) -> list[torch.Tensor]:
    return [*learner.actor, *learner.critic, *learner.critic_target, learner.log_alpha.unsqueeze(1)]


def _relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """|got - expected| / |expected| (Euclidean norms), on the CPU. Elementwise tolerances would not do
    after Adam steps: where a gradient is near zero, a rounding difference can flip its sign and move
    that element by a whole step."""
    got, expected = got.detach().cpu(), expected.detach().cpu()
    return ((got - expected).norm() / expected.norm()).item()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_one_members_data_changes_no_other_member(device, precision):
    spec = _spec(precision)
    clean, altered = (
        SACLearner(spec, OBS, ACT, SCALE, [0, 1, 2], device),
        SACLearner(spec, OBS, ACT, SCALE, [0, 1, 2], device),
    )
    buf_a, buf_b = _buffer(3, device), _buffer(3, device)
    buf_b.reward[1] += 5.0
    buf_b.obs[1] *= -3.0
    for _ in range(10):
        clean.update(buf_a.sample(spec.batch_size, clean.generators))
        altered.update(buf_b.sample(spec.batch_size, altered.generators))
    for a, b in zip(_params(clean), _params(altered)):
        k = a.shape[0] // 3
        for member in (0, 2):
            assert torch.equal(a[member * k : (member + 1) * k], b[member * k : (member + 1) * k])
    assert not torch.equal(clean.actor[0][1], altered.actor[0][1])


def _same_inputs(device: str, members: int, batch: int, seed: int) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """A batch and noises drawn on the CPU, moved to `device`: identical inputs on every device."""
    gen = torch.Generator().manual_seed(seed)
    batch_cpu = _buffer(members, "cpu", seed=seed).sample(batch, [gen] * members)
    noise_next, noise = torch.randn(members, batch, ACT, generator=gen), torch.randn(members, batch, ACT, generator=gen)
    moved = Batch(**{f.name: getattr(batch_cpu, f.name).to(device) for f in dataclasses.fields(Batch)})
    return moved, noise_next.to(device), noise.to(device)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_losses_on_the_device_equal_the_cpu_fp32_losses(device, precision):
    # The same weights, batch and noise: fp32 on any device agrees with the CPU to float32 rounding of
    # differently ordered sums; bf16 within bf16's tolerance (see test_precision.py).
    tolerance = 1e-4 if precision == "fp32" else 2e-3
    cpu = SACLearner(_spec("fp32"), OBS, ACT, SCALE, [3], "cpu")
    dev = SACLearner(_spec(precision), OBS, ACT, SCALE, [3], device)
    values = []
    for learner, where in ((cpu, "cpu"), (dev, device)):
        batch, noise_next, noise = _same_inputs(where, 1, 64, seed=11)
        lc, _, target = critic_loss(learner, batch, noise_next)
        la, pi = actor_loss(learner, batch, noise, [p.detach() for p in learner.critic])
        values.append([v.detach().cpu() for v in (lc, la, target, pi.log_prob)])
    for got, expected in zip(values[1], values[0], strict=True):
        assert _relative_error(got, expected) < tolerance


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_updates_on_the_device_track_the_cpu(device, precision):
    # Five updates on identical inputs: the parameters stay within a small relative distance of the
    # CPU's (bf16 against the CPU's bf16: both round the same products, in different kernels).
    spec = _spec(precision)
    cpu, dev = SACLearner(spec, OBS, ACT, SCALE, [4, 5], "cpu"), SACLearner(spec, OBS, ACT, SCALE, [4, 5], device)
    for step in range(5):
        for learner, where in ((cpu, "cpu"), (dev, device)):
            learner._update_fn(learner, *_same_inputs(where, 2, spec.batch_size, seed=20 + step))
    for got, expected in zip(_params(dev), _params(cpu)):
        assert _relative_error(got, expected) < (1e-3 if precision == "fp32" else 1e-2)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("device", DEVICES)
def test_members_match_each_seed_alone(device, precision):
    # On the CPU bit for bit (test_learner.py, test_precision.py). On a GPU the GEMM library may pick
    # another kernel for another batch count, so only closeness is asserted here; `gpu-check` reports
    # whether they are also bit-identical there.
    spec = _spec(precision, hidden_sizes=(32, 32), batch_size=32)
    seeds = list(range(30, 36))
    batched, alone = train_batched_and_alone(spec, seeds, _buffer(len(seeds), device), 10, device)
    for m, learner in enumerate(alone):
        for stacked, single in zip(_params(batched), _params(learner)):
            k = stacked.shape[0] // len(seeds)
            part = stacked[m * k : (m + 1) * k]
            if device == "cpu":
                assert torch.equal(part, single)
            else:
                assert _relative_error(part, single) < 1e-3
