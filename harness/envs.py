"""The benchmark's environments and how the harness steps them."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode


@dataclass(frozen=True)
class EnvInfo:
    env_id: str
    short: str
    obs_dim: int
    act_dim: int
    low: np.ndarray
    high: np.ndarray

    @property
    def action_scale(self) -> np.ndarray:
        return ((self.high - self.low) / 2.0).astype(np.float32)


ENV_IDS = ("Pendulum-v1", "LunarLanderContinuous-v3", "BipedalWalker-v3")


def env_info(env_id: str) -> EnvInfo:
    env = gym.make(env_id)
    try:
        space = env.action_space
        return EnvInfo(
            env_id,
            env_id.split("-")[0],
            int(np.prod(env.observation_space.shape)),
            int(np.prod(space.shape)),
            space.low.astype(np.float64),
            space.high.astype(np.float64),
        )
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    """A synchronous vector env that autoresets in the same step.

    With SAME_STEP autoreset every step is a real transition: when a sub-env's episode ends, the obs
    returned is the next episode's first, and the true last obs is in info["final_obs"]. (The default
    NEXT_STEP mode would instead spend one step per episode on a reset that is not a transition.)
    """
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def true_next_obs(next_obs: np.ndarray, done: np.ndarray, info: dict) -> np.ndarray:
    """The observation each sub-env actually reached: info["final_obs"] where its episode ended."""
    if not done.any():
        return next_obs
    out = next_obs.copy()
    for i in np.flatnonzero(done):
        out[i] = info["final_obs"][i]
    return out
