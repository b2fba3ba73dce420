"""Shared builders for the tests: tiny specs, filled buffers, cloned generators."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from variants import REFERENCE
from variants.buffer import ReplayBuffer
from variants.learner import SACLearner

OBS, ACT = 3, 2
SCALE = np.array([2.0, 0.5], dtype=np.float32)


def tiny_spec(**changes):
    return dataclasses.replace(REFERENCE, hidden_sizes=(16, 16), batch_size=32, **changes)


def make_learner(spec, seeds=(0,)) -> SACLearner:
    return SACLearner(spec, OBS, ACT, SCALE, list(seeds))


def filled_buffer(members: int, n: int = 200, seed: int = 123) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(members, n, OBS, ACT)
    for _ in range(n):
        buf.add(
            rng.normal(size=(members, OBS)),
            rng.uniform(-1, 1, size=(members, ACT)),
            rng.normal(size=members),
            rng.normal(size=(members, OBS)),
            rng.random(members) < 0.1,
        )
    return buf


def clone_generator(gen: torch.Generator) -> torch.Generator:
    copy = torch.Generator()
    copy.set_state(gen.get_state())
    return copy


def all_params(learner: SACLearner) -> list[torch.Tensor]:
    return [*learner.actor, *learner.critic, *learner.critic_target, learner.log_alpha.unsqueeze(1)]


def member_buffer(buf: ReplayBuffer, m: int, device="cpu") -> ReplayBuffer:
    """Member m's transitions of a stacked buffer, as a one-member buffer of its own."""
    own = ReplayBuffer(1, buf.capacity, OBS, ACT, device)
    own.load_state_dict(
        {name: getattr(buf, name)[m : m + 1, : buf.size] for name in buf.FIELDS} | {"pos": buf.pos, "size": buf.size}
    )
    return own


def train_batched_and_alone(spec, seeds, buf: ReplayBuffer, updates: int, device="cpu"):
    """`updates` updates of one learner holding every seed as a member, and of one learner per seed on
    that member's transitions; returns (batched, [alone per seed])."""
    batched = SACLearner(spec, OBS, ACT, SCALE, list(seeds), device)
    alone = [SACLearner(spec, OBS, ACT, SCALE, [seed], device) for seed in seeds]
    own = [member_buffer(buf, m, device) for m in range(len(seeds))]
    for _ in range(updates):
        batched.update(buf.sample(spec.batch_size, batched.generators))
        for learner, b in zip(alone, own):
            learner.update(b.sample(spec.batch_size, learner.generators))
    return batched, alone
