"""Measure R_random, the mean return of a uniform random policy, on every benchmark environment.

Run as `python -m harness.running.random_baseline` (options: `--episodes`, `--seed`). It prints one line per
environment and the constants to paste into `harness/judging/normalization.py`.

The policy draws every action uniformly within the environment's action bounds, from the action
space's own generator seeded once with `--seed`; episode `i` resets the environment with seed
`--seed + i`, so the measurement is reproducible bit for bit on the same gymnasium/Box2D build.
Episodes end on termination or on the environment's registered time limit, as in training.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from .envs import ENV_IDS

DEFAULT_EPISODES = 100
DEFAULT_SEED = 0


@dataclass(frozen=True)
class RandomBaseline:
    """Returns of a uniform random policy on one environment."""

    env_id: str
    returns: np.ndarray  # (episodes,) undiscounted episode returns
    seed: int

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def standard_error(self) -> float:
        if self.returns.size < 2:
            return float("nan")
        return float(np.std(self.returns, ddof=1) / np.sqrt(self.returns.size))


def measure_random_return(env_id: str, episodes: int = DEFAULT_EPISODES, seed: int = DEFAULT_SEED) -> RandomBaseline:
    """Play `episodes` episodes of `env_id` with uniform random actions and record their returns."""
    env = gym.make(env_id)
    try:
        env.action_space.seed(seed)
        returns = np.zeros(episodes)
        for episode in range(episodes):
            env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total += float(reward)
                done = terminated or truncated
            returns[episode] = total
        return RandomBaseline(env_id, returns, seed)
    finally:
        env.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.running.random_baseline", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help="episodes per environment")
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="action-space seed; episode i resets with seed+i"
    )
    parser.add_argument("--envs", nargs="+", default=list(ENV_IDS), help="gymnasium ids")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")

    baselines = [measure_random_return(env_id, args.episodes, args.seed) for env_id in args.envs]
    for b in baselines:
        print(
            f"{b.env_id:<26} mean {b.mean:10.3f}  s.e. {b.standard_error:7.3f}  "
            f"min {b.returns.min():10.3f}  max {b.returns.max():10.3f}  ({b.returns.size} episodes, seed {b.seed})"
        )
    print("\nR_RANDOM = {")
    for b in baselines:
        print(f'    "{b.env_id}": {b.mean:.3f},')
    print("}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
