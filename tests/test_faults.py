"""Faults: a checkpoint that cannot be read, a member whose environment raises, kill -9 at random points,
corrupted records, concurrent grids. After each, the records tell the truth and a rerun finishes with
records equal to an uninterrupted run."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from harness import records
from harness.cli import main
from harness.running import grid
from harness.running.envs import EnvRef
from harness.running.profiles import budget_for
from harness.running.train import Interrupted, Job, checkpoint_path, checkpoint_previous, train_job
from variants import CATALOG, REFERENCE

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


# --- records verified before they are trusted; one configuration per folder ---------------------


def grid_args(out: Path, steps: int = 200, seeds: int = 4, *extra: str) -> list[str]:
    small = ["--set", "learning_starts=50", "--set", "hidden_sizes=16,16", "--set", "batch_size=32"]
    return [
        "run", "--variants", "reference", "--envs", "Pendulum-v1", "--seeds", str(seeds), "--steps", str(steps),
        "--profile", "smoke", "--eval-episodes", "1", "--out", str(out), "--no-report", "--workers", "1", *small, *extra,
    ]  # fmt: skip


def run_folder(out: Path, seed: int) -> Path:
    return Path(out) / "runs" / "Pendulum-v1" / "reference" / f"seed_{seed}"


def corrupt_each_record_kind(out: Path) -> None:
    """seed 0: eval.csv cut at a row boundary; seed 1: status.json's final_return changed; seed 2:
    config.json not JSON (seed 3 left as it is)."""
    eval_csv = run_folder(out, 0) / "eval.csv"
    eval_csv.write_text("".join(eval_csv.read_text().splitlines(keepends=True)[:-1]))
    status_path = run_folder(out, 1) / "status.json"
    status = json.loads(status_path.read_text())
    status_path.write_text(json.dumps(status | {"final_return": status["final_return"] + 1.0}))
    (run_folder(out, 2) / "config.json").write_text('{"variant": "refer')


def test_status_report_and_run_name_each_inconsistent_run_and_only_repair_retrains(tmp_path, capsys):
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert main(grid_args(whole)) == 0
    shutil.copytree(whole, out)
    corrupt_each_record_kind(out)
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 complete, 3 inconsistent" in printed
    assert "seed 0: eval.csv holds 19 evaluations (last at step 190)" in printed
    assert "seed 1: status.json final_return" in printed and "disagrees with eval.csv" in printed
    assert "seed 2: config.json is not valid JSON" in printed
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.count("disagrees with eval.csv") == 1 and "eval.csv holds 19 evaluations" in page
    assert main(grid_args(out)) == 0  # the same command again: nothing retrained silently
    assert capsys.readouterr().out.count("not retrained (rerun with --repair)") == 3
    assert main(grid_args(out, 200, 4, "--repair")) == 0
    for seed in range(4):
        assert curves_of(out, seed) == curves_of(whole, seed)
    assert len(list((out / "repaired" / "Pendulum-v1" / "reference").iterdir())) == 3  # kept aside
    capsys.readouterr()
    assert main(["status", str(out)]) == 0 and "total: 4 complete" in capsys.readouterr().out


def test_status_exits_2_when_no_run_has_records_that_agree(tmp_path, capsys):
    assert main(grid_args(tmp_path, seeds=1)) == 0
    (run_folder(tmp_path, 0) / "status.json").write_text("{not json")
    capsys.readouterr()
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "status.json is not valid JSON" in err[0]


def curves_of(out: Path, seed: int) -> dict[str, object]:
    """A run's curves and its status.json but for the wall time (which differs between two trainings)."""
    status = json.loads((run_folder(out, seed) / "status.json").read_text())
    status = {k: v for k, v in status.items() if k not in ("wall_s", "steps_per_s")}
    return {name: (run_folder(out, seed) / name).read_bytes() for name in CURVES} | {"status": status}


def test_a_second_grid_of_another_configuration_on_one_folder_is_refused(tmp_path, capsys):
    # The first grid still running: planned and started, no run finished yet.
    grid.record_grid_identity([tiny_job(tmp_path / "running", (0, 1), 300)])
    assert main(grid_args(tmp_path / "running", 400, 2)) == 2
    err = capsys.readouterr().err
    assert "eval_every 20 here, 15 recorded, total_steps 400 here, 300 recorded)" in err
    # The first grid finished: a second with another spec is refused too, naming the field.
    assert main(grid_args(tmp_path / "done", 200, 1)) == 0
    capsys.readouterr()
    assert main([*grid_args(tmp_path / "done", 200, 2), "--set", "gamma=0.9"]) == 2
    assert "gamma 0.9 here, 0.99 recorded" in capsys.readouterr().err
    assert not run_folder(tmp_path / "done", 1).exists()
    assert main(grid_args(tmp_path / "done", 200, 2)) == 0  # the same configuration: one more seed


# --- kill -9 at random points, inside record and checkpoint writes too -------------------------------

# 6 trials in the usual run (two of each kind); SACBENCH_KILL_TRIALS=20 for the full study (about 90 s).
KILL_TRIALS = int(os.environ.get("SACBENCH_KILL_TRIALS", "6"))
KILL_STEPS = 120  # a checkpoint every 12 env steps, an evaluation every 6


def kill_request(out: Path) -> grid.GridRequest:
    budget = budget_for("smoke", "Pendulum-v1", KILL_STEPS, eval_episodes=1)
    entry = dataclasses.replace(CATALOG["reference"], spec=TINY)
    return grid.GridRequest(
        {"reference": entry}, {}, ["Pendulum-v1"], range(2), {"Pendulum-v1": budget}, out, "cpu", 2, ()
    )


def _train_grid(out: Path, repair: bool = False) -> None:
    grid.execute(grid.plan(kill_request(out), repair=repair).jobs, workers=1, log=lambda *a: None)


def _killed_at(out: Path, kind: str, at: int) -> None:
    """In a forked child: train the grid and SIGKILL itself at env step `at` ('step'), or inside the
    `at`-th atomic file write, after its data is written and before it is renamed into place ('write'),
    or just after the `at`-th written file is renamed into place cut to half its length ('torn')."""
    if kind == "step":
        calls = iter(range(10**6))
        original = grid.train_claimed

        def killing(job, on_progress, should_stop):
            return original(job, on_progress, lambda: next(calls) == at and os.kill(os.getpid(), signal.SIGKILL))

        grid.train_claimed = killing
    else:
        writes, real_replace, real_fsync, torn = iter(range(10**6)), os.replace, os.fsync, []

        def replace(src, dst):
            if kind == "write" and next(writes) == at:
                os.kill(os.getpid(), signal.SIGKILL)
            real_replace(src, dst)
            if torn:  # the torn file is in place: the worst a non-atomic file system could leave
                os.kill(os.getpid(), signal.SIGKILL)

        def fsync(fd):
            if kind == "torn" and next(writes) == at:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
                torn.append(fd)
            return real_fsync(fd)

        os.replace, os.fsync = replace, fsync
    _train_grid(out)


def _in_child(target, *args) -> int:
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(120)
    return child.exitcode


def test_kill_9_at_random_points_then_a_rerun_gives_the_uninterrupted_records(tmp_path):
    whole = tmp_path / "whole"
    assert _in_child(_train_grid, whole) == 0
    rng = np.random.default_rng(47)
    killed = 0
    for trial in range(KILL_TRIALS):
        out = tmp_path / f"trial_{trial}"
        kind = ("step", "write", "torn")[trial % 3]
        at = int(rng.integers(1, KILL_STEPS)) if kind == "step" else int(rng.integers(0, 40))
        killed += _in_child(_killed_at, out, kind, at) == -signal.SIGKILL
        states = {r["seed"]: r["state"] for r in records.folder_states(out)}
        assert set(states.values()) <= {"stopped", "complete", "inconsistent"}, (trial, kind, at, states)
        if kind != "torn":  # atomic writes: a killed run is stopped or complete, never half written
            assert "inconsistent" not in states.values(), (trial, kind, at, states)
        assert _in_child(_train_grid, out, "inconsistent" in states.values()) == 0
        assert [r["state"] for r in records.folder_states(out)] == ["complete", "complete"], (trial, kind, at)
        for seed in range(2):
            assert grid_curves(out, seed) == grid_curves(whole, seed), (trial, kind, at, seed)
    assert killed >= KILL_TRIALS * 2 // 3  # (a write count past the run's last write kills nothing)


def test_two_grids_on_one_folder_at_once_train_each_run_once(tmp_path):
    whole, shared = tmp_path / "whole", tmp_path / "shared"
    assert _in_child(_train_grid, whole) == 0
    ctx = multiprocessing.get_context("fork")
    grids = [ctx.Process(target=_train_grid, args=(shared,)) for _ in range(2)]
    for g in grids:
        g.start()
    for g in grids:
        g.join(120)
    assert [g.exitcode for g in grids] == [0, 0]
    for seed in range(2):
        assert grid_curves(shared, seed) == grid_curves(whole, seed)


def grid_curves(out: Path, seed: int) -> dict[str, object]:
    folder = Path(out) / "runs" / "Pendulum-v1" / "reference" / f"seed_{seed}"
    status = json.loads((folder / "status.json").read_text())
    status = {k: v for k, v in status.items() if k not in ("wall_s", "steps_per_s")}
    return {name: (folder / name).read_bytes() for name in CURVES} | {"status": status}
