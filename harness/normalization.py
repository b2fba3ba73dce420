"""Normalized scores: returns mapped so that a uniform random policy scores 0 and the target scores 1.

    normalized = (R - R_random) / (R_target - R_random)

Normalizing lets one aggregate (IQM, mean, median, optimality gap) pool environments whose returns
live on different scales. Per environment the map is affine and increasing, so it changes no
ranking and no probability of improvement; it only matters for aggregates over environments.
"""

from __future__ import annotations

import numpy as np

# R_target: the return at which an environment counts as solved. LunarLanderContinuous-v3 (200) and
# BipedalWalker-v3 (300) use gymnasium's documented "solved" thresholds. Pendulum-v1 has none; -150
# is this benchmark's choice, about the average return of a policy that swings up and balances.
R_TARGET: dict[str, float] = {
    "Pendulum-v1": -150.0,
    "LunarLanderContinuous-v3": 200.0,
    "BipedalWalker-v3": 300.0,
}

# R_random: mean undiscounted return of a uniform random policy (actions uniform within the action
# bounds), measured with
#     python -m harness.random_baseline            (= --episodes 100 --seed 0)
# i.e. 100 episodes per environment, the action space seeded with 0, episode i reset with seed i,
# each episode run to termination or the registered time limit (gymnasium 1.x with box2d).
# Standard errors of these means: Pendulum 29.5, LunarLanderContinuous 11.2, BipedalWalker 1.5.
R_RANDOM: dict[str, float] = {
    "Pendulum-v1": -1207.555,
    "LunarLanderContinuous-v3": -212.676,
    "BipedalWalker-v3": -102.816,
}


def can_normalize(env_id: str) -> bool:
    """Whether both reference returns of `env_id` are known."""
    return env_id in R_TARGET and env_id in R_RANDOM


def normalized_score(returns: np.ndarray | float, env_id: str) -> np.ndarray:
    """`(returns - R_random) / (R_target - R_random)` of `env_id`, elementwise, same shape as `returns`.

    Raises KeyError naming the environment when its constants are unknown.
    """
    if not can_normalize(env_id):
        raise KeyError(f"no normalization constants for {env_id!r}; known: {', '.join(sorted(R_TARGET))}")
    low, high = R_RANDOM[env_id], R_TARGET[env_id]
    return (np.asarray(returns, dtype=np.float64) - low) / (high - low)
