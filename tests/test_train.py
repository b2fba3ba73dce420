import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import filled_buffer, make_learner, tiny_spec

from harness.running.envs import LockstepEnvs, make_vector_env
from harness.running.profiles import budget_for
from harness.running.train import (
    Interrupted,
    Job,
    MemberRecord,
    _record_diagnostics,
    checkpoint_path,
    store_transition,
    train_job,
)
from variants import CATALOG, REFERENCE
from variants.buffer import ReplayBuffer

FAST = dict(hidden_sizes=(32, 32), batch_size=64, learning_starts=100)


def job_for(tmp_path, variant="reference", seeds=(0,), steps=300, env_id="Pendulum-v1", **changes):
    entry = CATALOG[variant]
    spec = dataclasses.replace(entry.spec, **changes)
    return Job(
        variant,
        entry.description,
        spec,
        changes,
        env_id,
        tuple(seeds),
        budget_for("smoke", env_id, steps),
        str(tmp_path),
    )


def test_truncated_transition_stores_final_obs_and_keeps_bootstrap():
    envs = LockstepEnvs("Pendulum-v1", 1)
    buf = ReplayBuffer(1, 300, 3, 1)
    obs = envs.reset([0])
    for _t in range(200):
        action = np.zeros((1, 1), dtype=np.float32)
        next_obs, reward, terminated, truncated, final_obs = envs.step(action)
        done = store_transition(buf, REFERENCE, "Pendulum-v1", obs, action, reward, final_obs, terminated, truncated)
        obs = next_obs
    envs.close()
    assert done[0] and truncated[0] and not terminated[0]  # Pendulum's 200-step time limit
    np.testing.assert_allclose(buf.next_obs[0, 199].numpy(), final_obs[0], rtol=1e-6)
    assert not np.allclose(final_obs[0], next_obs[0])  # the episode's end, not the reset observation
    assert buf.terminated.sum() == 0  # a truncation never stops bootstrapping


def test_terminated_transition_is_flagged():
    buf = ReplayBuffer(2, 4, 2, 1)
    store_transition(
        buf,
        REFERENCE,
        "Pendulum-v1",
        np.zeros((2, 2)),
        np.zeros((2, 1)),
        np.array([1.0, 2.0]),
        np.array([[9.0, 9.0], [7.0, 7.0]]),
        np.array([True, False]),
        np.array([False, True]),
    )
    assert buf.terminated[:, 0].tolist() == [1.0, 0.0]
    assert buf.next_obs[:, 0].tolist() == [[9.0, 9.0], [7.0, 7.0]]


def test_lockstep_envs_step_like_gymnasium_same_step_autoreset():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(700, 2, 2)).astype(np.float32)
    ours, theirs = LockstepEnvs("LunarLanderContinuous-v3", 2), make_vector_env("LunarLanderContinuous-v3", 2)
    a, _ = ours.reset([5, 6]), None
    b, _ = theirs.reset(seed=[5, 6])
    ends = 0
    for act in actions:
        a, ra, ta, tra, final = ours.step(act)
        b, rb, tb, trb, info = theirs.step(act)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ra, rb)
        for i in np.flatnonzero(ta | tra):
            np.testing.assert_array_equal(final[i], info["final_obs"][i])
            ends += 1
    assert ends >= 2  # episodes ended and were reset along the way
    ours.close(), theirs.close()


def test_lockstep_envs_checkpoint_replays_to_the_same_state():
    rng = np.random.default_rng(1)
    actions = rng.uniform(-1, 1, size=(400, 2, 2)).astype(np.float32)
    envs = LockstepEnvs("LunarLanderContinuous-v3", 2)
    envs.reset([3, 4])
    for act in actions[:250]:
        envs.step(act)
    state = torch.load(_roundtrip(envs.state_dict()), weights_only=True)
    resumed = LockstepEnvs("LunarLanderContinuous-v3", 2)
    obs_resumed = resumed.load_state_dict(state)
    for act in actions[250:]:
        x, y = envs.step(act), resumed.step(act)
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    assert obs_resumed.shape == (2, 8)


def _roundtrip(obj):
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_same_seed_twice_gives_identical_records(tmp_path):
    a = train_job(job_for(tmp_path / "a", **FAST))
    b = train_job(job_for(tmp_path / "b", **FAST))
    for name in ("eval.csv", "train.csv", "diagnostics.csv"):
        pa = tmp_path / "a/runs/Pendulum-v1/reference/seed_0" / name
        pb = tmp_path / "b/runs/Pendulum-v1/reference/seed_0" / name
        assert pa.read_bytes() == pb.read_bytes(), name
    assert a[0]["final_return"] == b[0]["final_return"]


def test_run_records_follow_the_schema(tmp_path):
    rows = train_job(job_for(tmp_path, seeds=(3,), **FAST))
    run = tmp_path / "runs/Pendulum-v1/reference/seed_3"
    config, status = json.loads((run / "config.json").read_text()), json.loads((run / "status.json").read_text())
    assert config["spec"]["hidden_sizes"] == [32, 32] and config["seed"] == 3 and config["env"] == "Pendulum-v1"
    assert {"torch", "gymnasium", "numpy", "python"} <= set(config["versions"])
    assert status["state"] == "complete" and status["env_steps"] == 300
    evals = pd.read_csv(run / "eval.csv")
    assert len(evals) == 20 and evals["env_step"].iloc[-1] == 300 and (evals["episodes"] == 2).all()
    assert rows[0]["final_return"] == pytest.approx(evals["return_mean"].iloc[-1])
    assert rows[0]["auc_return"] == pytest.approx(evals["return_mean"].mean())
    train = pd.read_csv(run / "train.csv")
    assert (train["episode_length"] == 200).all()  # Pendulum episodes end at the time limit
    assert -2000 < train["episode_return"].iloc[0] < 0  # environment rewards, unscaled
    diag = (run / "diagnostics.csv").read_text().splitlines()
    assert diag[0].startswith("env_step,updates,critic_loss") and len(diag) > 1


def test_returns_are_unscaled_under_reward_scaling(tmp_path):
    fast = dict(FAST, learning_starts=250)
    train_job(job_for(tmp_path / "a", **fast))
    scaled = train_job(job_for(tmp_path / "b", reward="scale", reward_scale=100.0, **fast))

    # The first episode is all warm-up actions, identical in both runs: same environment return.
    def first(p):
        return (p / "runs/Pendulum-v1/reference/seed_0/train.csv").read_text().splitlines()[1]

    assert first(tmp_path / "a") == first(tmp_path / "b")
    # A Pendulum step costs at most 16.27, so an episode returns at least -3254; x100 would be far below.
    assert -3254 < scaled[0]["final_return"] < 0


def test_nonfinite_member_is_marked_diverged_and_others_go_on(tmp_path):
    learner = make_learner(tiny_spec(), (0, 1))
    buf = filled_buffer(2)
    poisoned = [t.detach().clone() for t in learner.actor]
    poisoned[0][1] = float("nan")
    learner.actor_params.copy_(poisoned)
    learner.update(buf.sample(32, learner.generators))
    members = [MemberRecord(0, tmp_path / "0"), MemberRecord(1, tmp_path / "1")]
    _record_diagnostics(learner, members, step=500)
    assert members[0].active and members[0].diag_rows[0][-1] == 0.0
    assert members[1].state == "diverged" and members[1].error_step == 500
    assert np.isfinite(members[0].diag_rows[0][2:]).all()


def test_critic_first_run_is_recorded_failed_with_step(tmp_path):
    rows = train_job(job_for(tmp_path, variant="critic-first", **FAST))
    status = json.loads((tmp_path / "runs/Pendulum-v1/critic-first/seed_0/status.json").read_text())
    assert rows[0]["state"] == "failed" and status["state"] == "failed"
    assert "modified by an inplace operation" in status["error"]
    assert status["error_step"] == 101  # the first update, right after learning_starts


@pytest.mark.parametrize("variant", list(CATALOG))
def test_every_catalog_variant_trains_a_smoke_run(tmp_path, variant):
    rows = train_job(job_for(tmp_path, variant=variant, seeds=(0, 1), steps=1100))
    expected = "failed" if variant == "critic-first" else "complete"
    assert [r["state"] for r in rows] == [expected, expected]
    if expected == "complete":
        assert all(r["env_steps"] == 1100 and np.isfinite(r["final_return"]) for r in rows)
        assert rows[0]["final_return"] != rows[1]["final_return"]  # seeds differ


@pytest.mark.parametrize("env_id", ["LunarLanderContinuous-v3", "BipedalWalker-v3"])
def test_box2d_envs_train(tmp_path, env_id):
    rows = train_job(job_for(tmp_path, env_id=env_id, steps=200, **dict(FAST, learning_starts=150)))
    assert rows[0]["state"] == "complete" and rows[0]["env_steps"] == 200


# 9 members: the checkpoint holds the small parameters and their Adam state one member at a time.
@pytest.mark.parametrize("seeds", [(0,), tuple(range(9))])
def test_interrupted_job_resumes_to_identical_records(tmp_path, seeds):
    fast = dict(FAST, learning_starts=50)
    train_job(job_for(tmp_path / "whole", seeds=seeds, steps=400, **fast))
    calls = iter(range(10_000))
    job = job_for(tmp_path / "split", seeds=seeds, steps=400, **fast)
    with pytest.raises(Interrupted):
        train_job(job, should_stop=lambda: next(calls) == 237)  # mid-episode, mid-interval
    assert checkpoint_path(job).exists()
    train_job(job)
    assert not checkpoint_path(job).exists()
    for seed in seeds:
        for name in ("eval.csv", "train.csv", "diagnostics.csv"):
            a = (tmp_path / f"whole/runs/Pendulum-v1/reference/seed_{seed}" / name).read_bytes()
            b = (tmp_path / f"split/runs/Pendulum-v1/reference/seed_{seed}" / name).read_bytes()
            assert a == b, (seed, name)
