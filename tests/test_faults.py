"""Faults: a checkpoint that cannot be read, a member whose environment raises, kill -9 at random points,
corrupted records, concurrent grids. After each, the records tell the truth and a rerun finishes with
records equal to an uninterrupted run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from harness.running.envs import EnvRef
from harness.running.profiles import budget_for
from harness.running.train import Interrupted, Job, checkpoint_path, checkpoint_previous, train_job
from variants import REFERENCE

TINY = dataclasses.replace(REFERENCE, hidden_sizes=(16, 16), batch_size=32, learning_starts=50)
CURVES = ("eval.csv", "train.csv", "diagnostics.csv")


def tiny_job(out: Path, seeds=(0,), steps: int = 400, env_ref: EnvRef | None = None) -> Job:
    env_id = env_ref.label if env_ref else "Pendulum-v1"
    budget = budget_for("smoke", "Pendulum-v1", steps, eval_episodes=1)
    return Job("reference", "tiny", TINY, {}, env_id, tuple(seeds), budget, str(out), env_ref=env_ref)


def curves(job: Job, seed: int) -> dict[str, bytes]:
    folder = Path(job.out) / "runs" / job.env_id / job.variant / f"seed_{seed}"
    return {name: (folder / name).read_bytes() for name in CURVES}


def interrupted_at(job: Job, call: int) -> None:
    calls = iter(range(10**6))
    with pytest.raises(Interrupted):
        train_job(job, should_stop=lambda: next(calls) == call)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_checkpoint_resumes_from_the_one_before(tmp_path, capsys):
    whole = tiny_job(tmp_path / "whole")
    train_job(whole)
    job = tiny_job(tmp_path / "cut")
    interrupted_at(job, 237)  # checkpoints at 200 (kept as .prev) and 237
    assert checkpoint_previous(checkpoint_path(job)).exists()
    truncate(checkpoint_path(job))
    rows = train_job(job)
    assert rows[0]["state"] == "complete" and rows[0]["env_steps"] == 400
    assert curves(job, 0) == curves(whole, 0)
    assert not checkpoint_path(job).exists() and not checkpoint_previous(checkpoint_path(job)).exists()
    assert "unreadable" not in capsys.readouterr().err  # the one before was good: nothing lost


def test_no_readable_checkpoint_restarts_from_0_keeping_the_history_aside(tmp_path, capsys):
    whole = tiny_job(tmp_path / "whole")
    train_job(whole)
    job = tiny_job(tmp_path / "cut")
    interrupted_at(job, 237)
    history = curves(job, 0)["eval.csv"]
    assert history.count(b"\n") == 1 + 11  # header and the evaluations every 20 steps up to 220
    truncate(checkpoint_path(job))
    truncate(checkpoint_previous(checkpoint_path(job)))
    rows = train_job(job)
    assert rows[0]["state"] == "complete" and rows[0]["env_steps"] == 400  # never "failed at step 0"
    assert curves(job, 0) == curves(whole, 0)  # restarted from step 0: the same run
    aside = list((Path(job.out) / "runs/Pendulum-v1/reference/seed_0").glob("eval.csv.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == history
    assert "checkpoint unreadable" in capsys.readouterr().err


class FailingForSeedOne(PendulumEnv):
    """Pendulum whose training env of seed 1 raises at its 150th step (evaluation envs have other seeds)."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed, self.steps = seed == 1, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.doomed and self.steps >= 150:
            raise RuntimeError("simulator exploded")
        return super().step(action)


def test_a_member_whose_env_raises_fails_alone(tmp_path):
    ref = EnvRef.of(f"{__name__}:FailingForSeedOne")
    alone = tiny_job(tmp_path / "alone", (0,), env_ref=ref)
    train_job(alone)
    job = tiny_job(tmp_path / "both", (0, 1), env_ref=ref)
    rows = train_job(job)
    assert [r["state"] for r in rows] == ["complete", "failed"]
    assert rows[0]["env_steps"] == 400 and rows[1]["env_steps"] == 149
    status = (Path(job.out) / "runs" / job.env_id / "reference/seed_1/status.json").read_text()
    assert "environment error: RuntimeError: simulator exploded" in status
    ok = (Path(job.out) / "runs" / job.env_id / "reference/seed_0/status.json").read_text()
    assert 'error": null' in ok
    assert curves(job, 0) == curves(alone, 0)  # the survivor's records: bit for bit its run alone
    assert np.isfinite(rows[0]["final_return"])
