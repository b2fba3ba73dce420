"""Budgets: environment steps per run, per profile and environment."""

from __future__ import annotations

from dataclasses import asdict, dataclass

EVAL_POINTS = 20


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    steps: dict[str, int]  # env id -> training env steps
    eval_episodes: int
    diag_every: int


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "smoke",
            "about 1,000 steps per env: plumbing tests only",
            {"Pendulum-v1": 1200, "LunarLanderContinuous-v3": 1200, "BipedalWalker-v3": 1200},
            2,
            200,
        ),
        # Short enough that the default check (2 variants x 3 seeds on 2 cores) fits CI's few minutes, long
        # enough that reference has learned to swing up (docs/measurements.md, profiles.py).
        Profile("ci", "Pendulum 5,000 steps: the regression check", {"Pendulum-v1": 5000}, 5, 500),
        Profile(
            "quick",
            "Pendulum 20k, LunarLanderContinuous 100k, BipedalWalker 200k",
            {"Pendulum-v1": 20_000, "LunarLanderContinuous-v3": 100_000, "BipedalWalker-v3": 200_000},
            10,
            1000,
        ),
        Profile(
            "full",
            "rl-baselines3-zoo budgets: Pendulum 20k, LunarLanderContinuous 500k, BipedalWalker 500k",
            {"Pendulum-v1": 20_000, "LunarLanderContinuous-v3": 500_000, "BipedalWalker-v3": 500_000},
            10,
            1000,
        ),
    )
}


@dataclass(frozen=True)
class Budget:
    profile: str
    total_steps: int
    eval_points: int
    eval_episodes: int
    diag_every: int

    @property
    def eval_every(self) -> int:
        return max(1, self.total_steps // self.eval_points)

    def eval_steps(self) -> list[int]:
        """Env steps after which to evaluate: evenly spaced, the last at total_steps."""
        return [round(i * self.total_steps / self.eval_points) for i in range(1, self.eval_points + 1)]

    def to_dict(self) -> dict:
        return asdict(self) | {"eval_every": self.eval_every}


class NoBudget(ValueError):
    """No profile names a step count for the environment, and none was given."""


def has_budget(profile: str, env_id: str) -> bool:
    """Whether `profile` (or, as a fallback, `quick`) names a step count for `env_id`."""
    return env_id in PROFILES[profile].steps or env_id in PROFILES["quick"].steps


def budget_for(profile: str, env_id: str, steps: int | None = None, eval_episodes: int | None = None) -> Budget:
    """The budget of `env_id` under `profile`; `steps` and `eval_episodes` override the profile's.

    An environment the profiles do not name (any Gymnasium id or a user's env) needs `steps`; its
    evaluation episodes are the profile's (`eval_episodes` overrides), as for every env. Raises NoBudget
    without `steps` for such an env.
    """
    p = PROFILES[profile]
    if steps is None and not has_budget(profile, env_id):
        raise NoBudget(f"the {profile} profile has no step budget for {env_id}; give --steps")
    total = steps if steps is not None else p.steps.get(env_id, PROFILES["quick"].steps.get(env_id))
    points = min(EVAL_POINTS, total)
    episodes = p.eval_episodes if eval_episodes is None else eval_episodes
    return Budget(profile, total, points, episodes, min(p.diag_every, max(1, total // 4)))
