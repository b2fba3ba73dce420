"""Replay buffer of preallocated tensors, one slice per member; no Python object per transition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Batch:
    """A sampled batch. Shapes: obs/next_obs (S, B, O), action (S, B, A), reward/terminated (S, B)."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor


class ReplayBuffer:
    """Circular buffer of (s, a, r, s', terminated) for S members stepped in lockstep.

    Every member adds one transition per environment step, so one write position serves all; each
    member samples its own indices from its own generator.
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, members: int, capacity: int, obs_dim: int, act_dim: int, device: torch.device | str = "cpu"):
        self.members, self.capacity, self.device = members, capacity, torch.device(device)
        f32 = dict(dtype=torch.float32, device=self.device)
        self.obs = torch.zeros(members, capacity, obs_dim, **f32)
        self.action = torch.zeros(members, capacity, act_dim, **f32)
        self.reward = torch.zeros(members, capacity, **f32)
        self.next_obs = torch.zeros(members, capacity, obs_dim, **f32)
        self.terminated = torch.zeros(members, capacity, **f32)
        self.pos = 0
        self.size = 0
        self._rows = torch.arange(members, device=self.device).unsqueeze(1)

    def add(
        self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray
    ) -> None:
        """Store one transition per member. Shapes: (S, O), (S, A), (S,), (S, O), (S,)."""
        for name, value in zip(self.FIELDS, (obs, action, reward, next_obs, terminated)):
            getattr(self, name)[:, self.pos] = torch.as_tensor(np.asarray(value, dtype=np.float32), device=self.device)
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> Batch:
        """Uniform sample with replacement, member m's indices drawn from generators[m]."""
        idx = torch.stack(
            [torch.randint(0, self.size, (batch_size,), generator=g, device=self.device) for g in generators]
        )
        return Batch(*(getattr(self, name)[self._rows, idx] for name in self.FIELDS))

    def state_dict(self) -> dict:
        return {name: getattr(self, name)[:, : self.size].clone() for name in self.FIELDS} | {
            "pos": self.pos,
            "size": self.size,
        }

    def load_state_dict(self, state: dict) -> None:
        self.pos, self.size = int(state["pos"]), int(state["size"])
        for name in self.FIELDS:
            getattr(self, name)[:, : self.size] = state[name].to(self.device)
