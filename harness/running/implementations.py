"""The code that trains each kind of catalog entry (`CatalogEntry.implementation`), as a registry.

"native" is the harness's own batched learner (`harness.running.train`); "sb3" is Stable-Baselines3's SAC
(`harness.running.sb3_peer`), imported only when an sb3 run is asked for, so that the harness works without
the optional `sb3` extra. Each trainer's code (and torch) is imported when it trains; asking an sb3 entry
whether it can train (`missing`, `problems`) imports Stable-Baselines3 and torch, so commands that only
read run records (`harness check --results`, `report`) never ask.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from variants.catalog import Implementation
from variants.spec import VariantSpec

if TYPE_CHECKING:
    from .train import Job

TrainFn = Callable[["Job", Callable[[int], None] | None, Callable[[], bool]], list]

SB3_INSTALL_HINT = 'Stable-Baselines3 is not installed (the sb3-sac variant needs it): pip install -e ".[sb3]"'


@dataclass(frozen=True)
class Trainer:
    """How the harness trains one implementation.

    Args:
        train: trains a job's seeds and writes their run records; returns the runs.csv rows.
        batches_members: whether one job trains several seeds as members of one learner
            (`--members`); when false every job gets one seed.
        missing: why it cannot run in this Python (a missing package), or None.
        problems: why it cannot train a given spec as specified ([] when it can).
    """

    train: TrainFn
    batches_members: bool
    missing: Callable[[], str | None]
    problems: Callable[[VariantSpec], list[str]]


def _native_train(
    job: Job, on_progress: Callable[[int], None] | None = None, should_stop: Callable[[], bool] = lambda: False
) -> list[dict]:
    from .train import train_job

    return train_job(job, on_progress, should_stop)


def _sb3_missing() -> str | None:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return SB3_INSTALL_HINT
    return None


def _sb3_train(
    job: Job, on_progress: Callable[[int], None] | None = None, should_stop: Callable[[], bool] = lambda: False
) -> list[dict]:
    from . import sb3_peer

    return sb3_peer.train_job(job, on_progress, should_stop)


def _sb3_problems(spec: VariantSpec) -> list[str]:
    from . import sb3_peer

    return sb3_peer.spec_problems(spec)


TRAINERS: dict[Implementation, Trainer] = {
    "native": Trainer(_native_train, batches_members=True, missing=lambda: None, problems=lambda spec: []),
    "sb3": Trainer(_sb3_train, batches_members=False, missing=_sb3_missing, problems=_sb3_problems),
}


def run_job(
    job: Job, on_progress: Callable[[int], None] | None = None, should_stop: Callable[[], bool] = lambda: False
) -> list[dict]:
    """Train `job` with the code its implementation names; returns the runs.csv rows."""
    return TRAINERS[job.implementation].train(job, on_progress, should_stop)
