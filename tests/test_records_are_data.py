"""A results folder is data: no command that reads one imports or calls what it names.

A hostile (or careless) results folder can name any `module:attr` as its environment; the commands that
read records (export, report, status, check, episodes) must never run it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.judging import episodes
from harness.running.envs import registered_ref
from harness.running.profiles import budget_for
from harness.running.train import Job, train_job
from variants import REFERENCE

TINY = dataclasses.replace(REFERENCE, hidden_sizes=(16, 16), batch_size=32, learning_starts=50)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Two complete tiny Pendulum runs (each with its config.json and policy.pt)."""
    out = tmp_path_factory.mktemp("trained")
    budget = budget_for("smoke", "Pendulum-v1", 200, eval_episodes=1)
    train_job(Job("reference", "tiny", TINY, {}, "Pendulum-v1", (0, 1), budget, str(out)))
    return out


def plant(results: Path, marker: Path) -> None:
    """Name `os:system` with a command that creates `marker` as the environment of every run, in
    config.json and in the config stored inside policy.pt."""
    payload = {"env_entry": "os:system", "env_kwargs": {"command": f"touch {marker}"}}
    for config_path in results.glob("runs/*/*/seed_*/config.json"):
        config = json.loads(config_path.read_text())
        config_path.write_text(json.dumps(config | payload))
    for policy_path in results.glob("runs/*/*/seed_*/policy.pt"):
        state = torch.load(policy_path, weights_only=True)
        state["config"] = state["config"] | payload
        torch.save(state, policy_path)


def test_no_command_that_reads_records_runs_what_they_name(trained: Path, tmp_path: Path, capsys) -> None:
    marker = tmp_path / "payload-ran"
    results = tmp_path / "shared"
    shutil.copytree(trained, results)
    plant(results, marker)
    assert main(["export", str(results), "--format", "torchscript"]) == 0
    out = capsys.readouterr().out
    assert "'os:system' is not a registered Gymnasium id" in out  # checked on normal draws, and said so
    assert main(["status", str(results)]) == 0
    assert main(["report", str(results), "--out", str(tmp_path / "report")]) == 0
    check = ["check", "--baseline", str(results), "--results", str(results), "--variants", "reference"]
    assert main(check) == 0
    assert episodes.main([str(results)]) == 0
    assert not marker.exists()


def test_only_registered_ids_are_rebuilt_from_records() -> None:
    assert registered_ref("Pendulum-v1", {"g": 9.81}).kwargs == {"g": 9.81}
    for entry in ("os:system", "gymnasium.envs.classic_control:PendulumEnv", "NoSuchEnv-v0", None, 3):
        assert registered_ref(entry, {}) is None
    assert episodes.time_limits({("x", "v", 0): {"env_entry": "evil_module:Env"}}) == {}
    assert episodes.time_limits({("Pendulum-v1", "v", 0): {"env_entry": "Pendulum-v1"}}) == {"Pendulum-v1": 200}
