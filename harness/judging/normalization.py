"""Normalized scores: returns mapped so that a uniform random policy scores 0 and the target scores 1.

    normalized = (R - R_random) / (R_target - R_random)

Normalizing lets one aggregate (IQM, mean, median, optimality gap) pool environments whose returns
live on different scales. Per environment the map is affine and increasing, so it changes no
ranking and no probability of improvement; it only matters for aggregates over environments.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

# R_target: the return at which an environment counts as solved. LunarLanderContinuous-v3 (200) and
# BipedalWalker-v3 (300) use gymnasium's documented "solved" thresholds. Pendulum-v1 has none; -150
# is this benchmark's choice, about the average return of a policy that swings up and balances.
#
# The MuJoCo targets are published SAC results: the final mean return of rl-baselines3-zoo's trained SAC
# agents (Stable-Baselines3, 1M steps; 2M for Humanoid; deterministic policy; benchmark.md of
# github.com/DLR-RM/rl-baselines3-zoo), measured on the -v3 tasks. The -v5 tasks keep their reward
# terms but give the healthy reward only while healthy (Hopper, Walker2d, Ant, Humanoid) and always
# charge Ant's contact cost (gymnasium's v5 changelogs), so these are close to, not equal to, what the
# same policies return on -v5.
R_TARGET: dict[str, float] = {
    "Pendulum-v1": -150.0,
    "LunarLanderContinuous-v3": 200.0,
    "BipedalWalker-v3": 300.0,
    "HalfCheetah-v5": 9535.451,
    "Hopper-v5": 2325.547,
    "Walker2d-v5": 3863.203,
    "Ant-v5": 4615.791,
    "Humanoid-v5": 6232.287,
    "Swimmer-v5": 345.568,
}

# R_random: mean undiscounted return of a uniform random policy (actions uniform within the action
# bounds), measured with
#     python -m harness.running.random_baseline            (= --episodes 100 --seed 0)
# i.e. 100 episodes per environment, the action space seeded with 0, episode i reset with seed i,
# each episode run to termination or the registered time limit (gymnasium 1.x with box2d).
# Standard errors of these means: Pendulum 29.5, LunarLanderContinuous 11.2, BipedalWalker 1.5.
# The MuJoCo rows the same way (gymnasium 1.4, mujoco 4.0.1), with
#     python -m harness.running.random_baseline --envs HalfCheetah-v5 Hopper-v5 Walker2d-v5 Ant-v5 Humanoid-v5 Swimmer-v5
# standard errors: HalfCheetah 7.3, Hopper 1.8, Walker2d 0.8, Ant 8.3, Humanoid 3.6, Swimmer 0.9.
R_RANDOM: dict[str, float] = {
    "Pendulum-v1": -1207.555,
    "LunarLanderContinuous-v3": -212.676,
    "BipedalWalker-v3": -102.816,
    "HalfCheetah-v5": -282.487,
    "Hopper-v5": 16.669,
    "Walker2d-v5": 1.770,
    "Ant-v5": -48.048,
    "Humanoid-v5": 112.599,
    "Swimmer-v5": 0.803,
}


def can_normalize(env_id: str) -> bool:
    """Whether both normalization returns of `env_id` (its random and target returns) are known."""
    return env_id in R_TARGET and env_id in R_RANDOM


def normalized_score(returns: np.ndarray | float, env_id: str) -> np.ndarray:
    """`(returns - R_random) / (R_target - R_random)` of `env_id`, elementwise, same shape as `returns`.

    Raises KeyError naming the environment when its constants are unknown.
    """
    if not can_normalize(env_id):
        raise KeyError(f"no normalization constants for {env_id!r}; known: {', '.join(sorted(R_TARGET))}")
    low, high = R_RANDOM[env_id], R_TARGET[env_id]
    return (np.asarray(returns, dtype=np.float64) - low) / (high - low)


# --- targets for other environments: given on the command line, recorded in the runs ------------------


def parse_score_anchors(items: Sequence[str], flag: str) -> dict[str, float]:
    """`ENV=RETURN` items of `--target` / `--random` as {env: return}; raises ValueError (one line)."""
    out: dict[str, float] = {}
    for item in items:
        env, sep, text = item.rpartition("=")
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not sep or not env.strip() or not np.isfinite(value):
            raise ValueError(
                f"{flag} {item!r}: expected ENV=RETURN with a finite number, e.g. {flag} HalfCheetah-v5=9000"
            )
        out[env.strip()] = value
    return out


def check_distinct(targets: Mapping[str, float], randoms: Mapping[str, float]) -> None:
    """Raise ValueError (one line) for an env whose target equals its random return (no scale)."""
    for env in sorted(set(targets) | set(randoms)):
        high, low = targets.get(env, R_TARGET.get(env)), randoms.get(env, R_RANDOM.get(env))
        if high is not None and low is not None and high == low:
            raise ValueError(
                f"{env}: the target return equals the random return ({high:g}); scores would divide by zero"
            )


def recorded(configs: Mapping[tuple[str, str, int], dict]) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
    """The targets and random returns recorded in run configs (config.json `normalization`, from `harness run
    --target/--random`), as ({env: target}, {env: random}, {env_entry: env}). Where an env's runs recorded
    different values the most common wins."""
    values: dict[tuple[str, str], Counter] = {}
    entries: dict[str, str] = {}
    for (env, _, _), config in configs.items():
        entries[str(config.get("env_entry") or env)] = env
        for key, value in (config.get("normalization") or {}).items():
            if key in ("target", "random") and isinstance(value, (int, float)):
                values.setdefault((key, env), Counter())[float(value)] += 1
    targets = {env: c.most_common(1)[0][0] for (key, env), c in values.items() if key == "target"}
    randoms = {env: c.most_common(1)[0][0] for (key, env), c in values.items() if key == "random"}
    return targets, randoms, entries


@contextlib.contextmanager
def extended(targets: Mapping[str, float], randoms: Mapping[str, float]) -> Iterator[None]:
    """Within the block, `targets` and `randoms` ({env: return}) join (and override) R_TARGET and
    R_RANDOM for everything that reads them; the tables are restored afterwards."""
    saved = dict(R_TARGET), dict(R_RANDOM)
    R_TARGET.update(targets)
    R_RANDOM.update(randoms)
    try:
        yield
    finally:
        R_TARGET.clear()
        R_TARGET.update(saved[0])
        R_RANDOM.clear()
        R_RANDOM.update(saved[1])
