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
        Profile("smoke", "about 1,000 steps per env: plumbing tests only",
                {"Pendulum-v1": 1200, "LunarLanderContinuous-v3": 1200, "BipedalWalker-v3": 1200}, 2, 200),
        # 5,000 steps keeps the default check (2 variants x 3 seeds on 2 cores) within 5 minutes on the
        # development machine (6,000 took 303 s); reference has reached about -150 by then.
        Profile("ci", "Pendulum 5,000 steps: the regression check",
                {"Pendulum-v1": 5000}, 5, 500),
        Profile("quick", "Pendulum 20k, LunarLanderContinuous 100k, BipedalWalker 200k",
                {"Pendulum-v1": 20_000, "LunarLanderContinuous-v3": 100_000, "BipedalWalker-v3": 200_000}, 10, 1000),
        Profile("full", "rl-baselines3-zoo budgets: Pendulum 20k, LunarLanderContinuous 500k, BipedalWalker 500k",
                {"Pendulum-v1": 20_000, "LunarLanderContinuous-v3": 500_000, "BipedalWalker-v3": 500_000}, 10, 1000),
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


def budget_for(profile: str, env_id: str, steps: int | None = None) -> Budget:
    """The budget of `env_id` under `profile`; `steps` overrides the step count."""
    p = PROFILES[profile]
    total = steps if steps is not None else p.steps.get(env_id, PROFILES["quick"].steps[env_id])
    points = min(EVAL_POINTS, total)
    return Budget(profile, total, points, p.eval_episodes, min(p.diag_every, max(1, total // 4)))
