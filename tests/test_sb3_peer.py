"""sb3-sac: Stable-Baselines3's SAC trained under the harness's protocol, beside the native variants."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import sys

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from harness import records
from harness.cli import main, select_variants
from harness.running.envs import LockstepEnvs
from harness.running.implementations import TRAINERS, run_job
from harness.running.profiles import Budget
from harness.running.train import Interrupted, Job, eval_reset_seeds
from variants.catalog import CATALOG, distinct_variants

needs_sb3 = pytest.mark.skipif(
    importlib.util.find_spec("stable_baselines3") is None, reason='needs Stable-Baselines3 (pip install -e ".[sb3]")'
)

ENV = "Pendulum-v1"


def mixed_grid_args(out) -> list[str]:
    """`harness run` arguments for a tiny grid of reference (2 members) beside sb3-sac, into `out`."""
    grid = f"run --variants reference,sb3-sac --envs {ENV} --seeds 2 --steps 200 --profile smoke --members 2"
    small = "--workers 1 --no-report --set learning_starts=64 --set batch_size=64 --set hidden_sizes=16,16"
    return [*grid.split(), *small.split(), "--out", str(out)]


# Small enough to train in a second or two; learning_starts + 1 >= batch_size, as spec_problems asks.
TINY = dict(learning_starts=64, batch_size=64, hidden_sizes=(16, 16))
STEPS = 300
BUDGET = Budget("smoke", STEPS, eval_points=3, eval_episodes=2, diag_every=100)  # evaluations at 100, 200, 300
CURVES = ("eval.csv", "train.csv", "diagnostics.csv")


def job_for(out, variant="sb3-sac", seeds=(0,), env_id=ENV, budget=BUDGET, **changes) -> Job:
    entry = CATALOG[variant]
    spec = dataclasses.replace(entry.spec, **{**TINY, **changes})
    return Job(
        variant,
        entry.description,
        spec,
        {},
        env_id,
        tuple(seeds),
        budget,
        str(out),
        implementation=entry.implementation,
    )


def run_path(out, seed, variant="sb3-sac", env_id=ENV):
    return records.run_dir(out, env_id, variant, seed)


@needs_sb3
def test_same_seed_gives_identical_records_and_another_seed_differs(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        [row] = run_job(job_for(tmp_path / name, seeds=(seed,)))
        assert row["state"] == "complete" and row["env_steps"] == STEPS
    for curve in CURVES:
        first = run_path(tmp_path / "a", 0) / curve
        assert first.read_bytes() == (run_path(tmp_path / "b", 0) / curve).read_bytes(), curve
    evals = pd.read_csv(run_path(tmp_path / "a", 0) / "eval.csv")
    assert evals["env_step"].tolist() == BUDGET.eval_steps() and (evals["episodes"] == 2).all()
    other = pd.read_csv(run_path(tmp_path / "c", 1) / "eval.csv")
    assert not np.array_equal(evals["return_mean"], other["return_mean"])
    # The records count the updates SB3 made: one per step after the warm-up.
    assert (
        pd.read_csv(run_path(tmp_path / "a", 0) / "diagnostics.csv")["updates"].sum() == STEPS - TINY["learning_starts"]
    )


class RecordingResets(gym.vector.VectorWrapper):
    """An evaluation env that notes the seeds of every reset."""

    def __init__(self, env, seen: list):
        super().__init__(env)
        self.seen = seen

    def reset(self, *, seed=None, options=None):
        self.seen.append(list(seed) if seed is not None else None)
        return super().reset(seed=seed, options=options)


@needs_sb3
def test_evaluation_and_training_envs_are_reset_with_the_native_seeds(tmp_path, monkeypatch):
    from harness.running import sb3_peer, train

    seen: dict[str, list] = {"sb3": [], "native": []}
    for module, key in ((sb3_peer, "sb3"), (train, "native")):
        make = module.make_vector_env
        monkeypatch.setattr(
            module,
            "make_vector_env",
            lambda env, n, make=make, key=key, **options: RecordingResets(make(env, n, **options), seen[key]),
        )
    run_job(job_for(tmp_path / "sb3", seeds=(3,)))
    run_job(job_for(tmp_path / "native", variant="reference", seeds=(3,)))
    expected = eval_reset_seeds((3,), BUDGET.eval_episodes)
    assert expected == [1_003_000, 1_003_001]
    assert seen["sb3"] == seen["native"] == [expected] * len(BUDGET.eval_steps())

    # The training env: SB3's first observation is the one LockstepEnvs gets from the run seed.
    model = sb3_peer.build_model(job_for(tmp_path).spec, ENV, seed=5, total_steps=STEPS)
    native = LockstepEnvs(ENV, 1)
    try:
        assert np.array_equal(model.env.reset()[0], native.reset([5])[0])
    finally:
        native.close()
        model.env.close()


@needs_sb3
def test_sb3_makes_as_many_updates_as_the_native_learner(tmp_path):
    from harness.running import sb3_peer

    spec = job_for(tmp_path).spec
    model = sb3_peer.build_model(spec, ENV, seed=0, total_steps=STEPS)
    model.learn(total_timesteps=STEPS)
    model.env.close()
    native_job = job_for(tmp_path / "native", variant="reference")
    run_job(native_job)
    native_updates = pd.read_csv(run_path(tmp_path / "native", 0, "reference") / "diagnostics.csv")["updates"].sum()
    assert sb3_peer.updates_made(model) == native_updates == STEPS - spec.learning_starts


@needs_sb3
def test_time_limit_truncation_bootstraps_from_the_last_observation(tmp_path):
    from harness.running import sb3_peer

    # No updates (learning_starts = budget): Pendulum's 200-step time limit ends the first episode.
    model = sb3_peer.build_model(job_for(tmp_path, learning_starts=250).spec, ENV, seed=0, total_steps=250)
    model.learn(total_timesteps=250)
    model.env.close()
    buffer = model.replay_buffer
    assert buffer.dones[199, 0] == 1.0 and buffer.timeouts[199, 0] == 1.0  # episode end by truncation...
    assert float(buffer._get_samples(np.array([199])).dones[0, 0]) == 0.0  # ...sampled as "not done": bootstraps
    assert np.array_equal(buffer.next_observations[198], buffer.observations[199])
    # The stored next observation is where the episode ended, not the next episode's reset observation.
    assert not np.allclose(buffer.next_observations[199], buffer.observations[200])


@needs_sb3
@pytest.mark.slow  # about 13 s: four runs with the smoke profile's 20 evaluations
def test_grid_of_reference_and_sb3_writes_the_same_records(tmp_path, capsys):
    out = tmp_path / "grid"
    code = main(mixed_grid_args(out))
    assert code == 0, capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(zip(runs.variant, runs.seed, runs.state, runs.env_steps)) == [
        ("reference", 0, "complete", 200),
        ("reference", 1, "complete", 200),
        ("sb3-sac", 0, "complete", 200),
        ("sb3-sac", 1, "complete", 200),
    ]
    native = {p.name for p in run_path(out, 0, "reference").iterdir()} - {
        "policy.pt"
    }  # the export reads a native learner
    for seed in (0, 1):
        folder = run_path(out, seed)
        assert {p.name for p in folder.iterdir()} == native
        config = json.loads((folder / "config.json").read_text())
        assert config["implementation"] == "sb3" and config["members"] == 1  # --members batches native seeds only
        assert config["versions"]["stable_baselines3"]
        diagnostics = pd.read_csv(folder / "diagnostics.csv")
        assert list(diagnostics.columns) == list(
            pd.read_csv(run_path(out, seed, "reference") / "diagnostics.csv").columns
        )
        assert diagnostics[["critic_loss", "actor_loss", "alpha", "alpha_loss"]].notna().all().all()
        assert diagnostics["entropy"].isna().all() and (diagnostics["nonfinite_count"] == 0).all()
    assert json.loads((run_path(out, 0, "reference") / "config.json").read_text())["members"] == 2
    # A rerun skips every finished run, sb3's included.
    assert main(mixed_grid_args(out)) == 0
    assert "4 already finished, 0 jobs" in capsys.readouterr().out


@needs_sb3
def test_a_stopped_run_leaves_no_status_and_its_rerun_starts_over(tmp_path):
    calls = itertools.count()
    with pytest.raises(Interrupted, match="stopped at env step 150; it restarts from its start on a rerun"):
        run_job(job_for(tmp_path / "a"), should_stop=lambda: next(calls) == 150)
    assert (run_path(tmp_path / "a", 0) / "config.json").exists()
    assert not (run_path(tmp_path / "a", 0) / "status.json").exists()  # unfinished: the grid plans it again
    run_job(job_for(tmp_path / "a"))
    run_job(job_for(tmp_path / "b"))
    for curve in CURVES:
        assert (run_path(tmp_path / "a", 0) / curve).read_bytes() == (run_path(tmp_path / "b", 0) / curve).read_bytes()


class NanRewardPendulum(PendulumEnv):
    """Pendulum whose rewards turn NaN after 100 steps (a learner fed them diverges)."""

    steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        return obs, (float("nan") if self.steps > 100 else reward), terminated, truncated, info


class BrokenPendulum(PendulumEnv):
    """Pendulum that raises at its 150th step."""

    steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 150:
            raise RuntimeError("the simulator broke")
        return super().step(action)


@needs_sb3
def test_nan_loss_is_diverged_and_an_exception_failed_as_natively(tmp_path):
    gym.register("SacbenchNanReward-v0", entry_point=NanRewardPendulum, max_episode_steps=200)
    gym.register("SacbenchBroken-v0", entry_point=BrokenPendulum, max_episode_steps=200)
    try:
        for env_id, state in (("SacbenchNanReward-v0", "diverged"), ("SacbenchBroken-v0", "failed")):
            for variant in ("sb3-sac", "reference"):
                [row] = run_job(job_for(tmp_path, variant=variant, env_id=env_id))
                status = json.loads((run_path(tmp_path, 0, variant, env_id) / "status.json").read_text())
                assert (row["state"], status["state"]) == (state, state), (variant, env_id)
                assert 100 <= status["error_step"] < STEPS
        assert "RuntimeError: the simulator broke" in status["error"]
    finally:
        gym.registry.pop("SacbenchNanReward-v0")
        gym.registry.pop("SacbenchBroken-v0")


@needs_sb3
def test_spec_problems_name_what_sb3_cannot_do():
    from harness.running import sb3_peer

    assert sb3_peer.spec_problems(CATALOG["sb3-sac"].spec) == []
    spec = dataclasses.replace(CATALOG["sb3-sac"].spec, log_prob="softplus", lr_critic=1e-3, learning_starts=10)
    problems = " | ".join(sb3_peer.spec_problems(spec))
    assert "log_prob='softplus'" in problems and "one learning rate" in problems and "learning_starts=10" in problems
    with pytest.raises(ValueError, match="cannot train this spec"):
        sb3_peer.build_model(spec, ENV, seed=0, total_steps=100)


@needs_sb3
def test_an_sb3_spec_it_cannot_train_is_a_usage_error(tmp_path, capsys):
    assert (
        main(
            [
                "run",
                "--variants",
                "sb3-sac",
                "--envs",
                ENV,
                "--set",
                "log_prob=softplus",
                "--out",
                str(tmp_path),
                "--no-report",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "log_prob='softplus'" in err and "Traceback" not in err


def test_missing_stable_baselines3_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # `import stable_baselines3` now raises ImportError
    assert main(["run", "--variants", "reference,sb3-sac", "--envs", ENV, "--out", str(tmp_path), "--no-report"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install -e ".[sb3]"' in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()
    # `all` runs what it can and says what it left out.
    _, variants = select_variants("all", [])
    assert "sb3-sac" not in variants and "reference" in variants
    assert "leaves out sb3-sac" in capsys.readouterr().err


def test_all_runs_one_of_two_bit_identical_variants():
    assert CATALOG["policy-first"].same_as == "joint-update"
    names = distinct_variants()
    assert "policy-first" not in names and {"joint-update", "critic-first", "reference", "sb3-sac"} <= set(names)
    for name, entry in CATALOG.items():  # a stand-in must itself run, or nothing would compute those numbers
        assert entry.same_as is None or entry.same_as in names, name
        assert entry.implementation in TRAINERS, name
    _, explicit = select_variants("policy-first,critic-first", [])
    assert list(explicit) == ["policy-first", "critic-first"]  # named explicitly, it still runs


def test_report_says_which_variant_stands_in_for_one_not_run():
    from harness.judging.report import same_as_note

    runs = pd.DataFrame({"variant": ["reference", "joint-update"]})
    note = same_as_note(runs)
    assert "<code>policy-first</code>: bit-identical to <code>joint-update</code>" in note
    assert same_as_note(pd.DataFrame({"variant": ["reference", "joint-update", "policy-first"]})) == ""
    assert same_as_note(pd.DataFrame({"variant": ["reference"]})) == ""
