"""Reward transforms: what the learner sees. Reported returns always use the environment's rewards."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

BIPEDAL_ENV_ID = "BipedalWalker-v3"
BIPEDAL_FALL_PENALTY = -100.0


def _none(reward: np.ndarray, env_id: str, reward_scale: float) -> np.ndarray:
    return reward


def _scale(reward: np.ndarray, env_id: str, reward_scale: float) -> np.ndarray:
    return reward * reward_scale


def _bipedal_fall_only(reward: np.ndarray, env_id: str, reward_scale: float) -> np.ndarray:
    # BipedalWalker's -100 fall penalty dwarfs the per-step rewards in [-1, 1]; its author removed it
    # (gym PR 787) as discouraging the agent from anything dangerous.
    if env_id == BIPEDAL_ENV_ID:
        reward = np.where(reward == BIPEDAL_FALL_PENALTY, -1.0, reward)
    return reward


def _bipedal_fall(reward: np.ndarray, env_id: str, reward_scale: float) -> np.ndarray:
    # The blog's fix: the fall penalty mapped to -1, then every reward times 10.
    return _bipedal_fall_only(reward, env_id, reward_scale) * 10.0


REWARD_TRANSFORMS: dict[str, Callable[[np.ndarray, str, float], np.ndarray]] = {
    "none": _none,
    "scale": _scale,
    "bipedal-fall": _bipedal_fall,
    "bipedal-fall-only": _bipedal_fall_only,
}


def transform_reward(reward: np.ndarray, kind: str, env_id: str, reward_scale: float = 1.0) -> np.ndarray:
    """The reward the learner trains on.

    Args:
        reward: environment rewards, any shape.
        kind: a `VariantSpec.reward` value.
        env_id: the gymnasium id (the bipedal-fall transform only remaps BipedalWalker's penalty).
        reward_scale: multiplier of the "scale" transform.
    Returns:
        float32 array of the same shape.
    """
    out = REWARD_TRANSFORMS[kind](np.asarray(reward, dtype=np.float64), env_id, reward_scale)
    return np.asarray(out, dtype=np.float32)
