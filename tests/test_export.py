"""Final policies: written at the end of each run, equal to the policy the harness evaluated, exported to
ONNX / TorchScript and checked in their runtimes; TensorBoard scalars; a MuJoCo task."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import make_learner, tiny_spec

from harness.cli import main
from harness.running.envs import env_info
from harness.running.policy import PolicyModule, load_policy_state
from harness.running.profiles import budget_for
from harness.running.train import Job, train_job
from variants import REFERENCE
from variants.actions import env_action

TINY = dataclasses.replace(REFERENCE, hidden_sizes=(16, 16), batch_size=32, learning_starts=50)


def _train(
    out: Path, env_id: str, seeds=(0, 1), steps: int = 200, spec=TINY, should_stop=lambda: False, **job
) -> list[dict]:
    budget = budget_for("smoke", env_id, steps, eval_episodes=1)
    return train_job(
        Job("reference", "tiny", spec, {}, env_id, tuple(seeds), budget, str(out), **job), should_stop=should_stop
    )


def test_policy_module_is_the_evaluated_policy():
    """The saved member, rebuilt as nn.Linear layers, maps observations to the action that evaluation
    sends to the environment (tanh of the mean, affinely onto the bounds)."""
    learner = make_learner(tiny_spec(), seeds=(3, 4, 5))
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    for member in range(3):
        state = {
            "format": "sacbench-policy-1",
            "weights": [p[member].detach().clone() for p in learner.actor],
            "act_dim": 2,
            "action_low": list(low),
            "action_high": list(high),
        }
        module = PolicyModule.from_state(state)
        with torch.no_grad():
            ours = module(torch.as_tensor(obs)).numpy()
        stacked = np.repeat(obs[None], 3, axis=0)
        evaluated = env_action(learner.act(stacked, deterministic=True)[member], low, high, "affine", True)
        np.testing.assert_allclose(ours, evaluated, rtol=0, atol=1e-6)
        assert ours.min() >= -2.0 and ours.max() <= 2.0
    assert not np.allclose(
        ours,
        PolicyModule.from_state({**state, "weights": [p[0] for p in learner.actor]})(torch.as_tensor(obs))
        .detach()
        .numpy(),
    )


def test_complete_runs_write_their_final_policy(tmp_path):
    rows = _train(tmp_path, "Pendulum-v1")
    assert [r["state"] for r in rows] == ["complete", "complete"]
    states = [
        load_policy_state(tmp_path / "runs" / "Pendulum-v1" / "reference" / f"seed_{s}" / "policy.pt") for s in (0, 1)
    ]
    for seed, state in zip((0, 1), states):
        assert (state["obs_dim"], state["act_dim"], state["env_steps"]) == (3, 1, 200)
        assert state["action_low"] == [-2.0] and state["action_high"] == [2.0]
        assert state["config"]["seed"] == seed and state["config"]["spec"]["hidden_sizes"] == [16, 16]
        assert [tuple(w.shape) for w in state["weights"]] == [(3, 16), (1, 16), (16, 16), (1, 16), (16, 2), (1, 2)]
    assert not torch.equal(states[0]["weights"][0], states[1]["weights"][0])  # each member its own slice


def test_a_failed_run_writes_no_policy(tmp_path):
    spec = dataclasses.replace(TINY, update_order="critic-first")
    rows = _train(tmp_path, "Pendulum-v1", seeds=(0,), spec=spec)
    assert rows[0]["state"] == "failed"
    assert not (tmp_path / "runs" / "Pendulum-v1" / "reference" / "seed_0" / "policy.pt").exists()


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "LunarLanderContinuous-v3"])
def test_onnx_export_gives_the_pytorch_actions(tmp_path, capsys, env_id):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    _train(tmp_path, env_id)
    assert main(["export", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("max abs difference vs PyTorch on 1,000 observations") == 2
    info = env_info(env_id)
    for seed in (0, 1):
        run = tmp_path / "runs" / env_id / "reference" / f"seed_{seed}"
        meta = json.loads((run / "policy.onnx.json").read_text())
        assert meta["check"]["observations"] == 1000 and meta["check"]["max_abs_diff_vs_pytorch"] <= 1e-5
        assert meta["input"]["shape"] == ["batch", info.obs_dim] and meta["env"] == env_id
        # Independently of the command's own check: onnxruntime against the module on fresh observations.
        module = PolicyModule.from_state(load_policy_state(run / "policy.pt"))
        obs = np.random.default_rng(seed).uniform(-1, 1, size=(1000, info.obs_dim)).astype(np.float32)
        got = ort.InferenceSession(str(run / "policy.onnx")).run(["action"], {"observation": obs})[0]
        with torch.no_grad():
            want = module(torch.as_tensor(obs)).numpy()
        assert got.shape == (1000, info.act_dim)
        assert np.max(np.abs(got - want)) <= 1e-5
        assert (got >= info.low - 1e-6).all() and (got <= info.high + 1e-6).all()


def test_torchscript_export_gives_the_pytorch_actions(tmp_path, capsys):
    _train(tmp_path, "Pendulum-v1", seeds=(0,))
    assert main(["export", str(tmp_path), "--format", "torchscript"]) == 0
    assert (
        "policy.torchscript.pt, max abs difference vs PyTorch on 1,000 observations 0 (ok)" in capsys.readouterr().out
    )
    meta = json.loads(
        (tmp_path / "runs" / "Pendulum-v1" / "reference" / "seed_0" / "policy.torchscript.pt.json").read_text()
    )
    assert meta["check"]["max_abs_diff_vs_pytorch"] == 0.0


def test_export_without_policies_exits_2(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    # TorchScript: torch alone, so the folder is what is checked, with or without the export extra.
    assert main(["export", str(tmp_path), "--format", "torchscript"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no run under" in err
    assert main(["export", str(tmp_path / "missing")]) == 2


def test_tensorboard_scalars_equal_the_csv_records(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _train(tmp_path, "Pendulum-v1", seeds=(0,), tensorboard=True)
    run = tmp_path / "runs" / "Pendulum-v1" / "reference" / "seed_0"
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    evals = pd.read_csv(run / "eval.csv")
    logged = [(e.step, e.value) for e in events.Scalars("eval/return_mean")]
    assert [s for s, _ in logged] == evals["env_step"].tolist()
    np.testing.assert_allclose([v for _, v in logged], evals["return_mean"], rtol=1e-6)
    diag = pd.read_csv(run / "diagnostics.csv")
    alpha = [(e.step, e.value) for e in events.Scalars("diagnostics/alpha")]
    assert [s for s, _ in alpha] == diag["env_step"].tolist()
    np.testing.assert_allclose([v for _, v in alpha], diag["alpha"], rtol=1e-6)


def test_tensorboard_scalars_of_a_resumed_run_equal_the_csv_records(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from harness.running.train import Interrupted

    calls = iter(range(10_000))
    # Evaluations every 19 steps; stopped at step 205, after the episode that ended at 200 was written on
    # stopping but before the evaluation at 209: the resumed run purges it and writes it once more.
    with pytest.raises(Interrupted):
        _train(tmp_path, "Pendulum-v1", seeds=(0,), steps=380, tensorboard=True, should_stop=lambda: next(calls) == 205)
    _train(tmp_path, "Pendulum-v1", seeds=(0,), steps=380, tensorboard=True)
    run = tmp_path / "runs" / "Pendulum-v1" / "reference" / "seed_0"
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    for tag, csv, column in (
        ("eval/return_mean", "eval.csv", "return_mean"),
        ("train/episode_return", "train.csv", "episode_return"),
        ("diagnostics/critic_loss", "diagnostics.csv", "critic_loss"),
    ):
        records = pd.read_csv(run / csv)
        logged = events.Scalars(tag)
        assert [e.step for e in logged] == records["env_step"].tolist(), tag
        np.testing.assert_allclose([e.value for e in logged], records[column], rtol=1e-6)


def test_mujoco_task_trains(tmp_path):
    pytest.importorskip("mujoco")
    rows = _train(tmp_path, "InvertedPendulum-v5", seeds=(0,), steps=150)
    assert rows[0]["state"] == "complete" and rows[0]["env_steps"] == 150
    evals = pd.read_csv(tmp_path / "runs" / "InvertedPendulum-v5" / "reference" / "seed_0" / "eval.csv")
    # A reward of 1 per step while the pole stands: every evaluation return is a positive step count.
    assert (evals["return_mean"] >= 1).all() and (evals["return_mean"] == evals["return_mean"].round()).all()
    assert (tmp_path / "runs" / "InvertedPendulum-v5" / "reference" / "seed_0" / "policy.pt").exists()
