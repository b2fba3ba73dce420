"""Reading run records: runs.csv is never read, unfinished and corrupt run folders are skipped with a
line naming them, and every run's curves and diagnostics are keyed by (env, variant, seed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_stats import EVAL_POINTS, FINALS, write_cell, write_run

from harness import records
from harness.judging import loading, stats


def test_load_runs_reads_folders_not_runs_csv(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", FINALS[:3])
    write_run(tmp_path, "Pendulum-v1", "critic-first", 0, state="failed")
    (tmp_path / "runs.csv").write_text("garbage that must not be read\n")
    runs, warnings = loading.load_runs(tmp_path)
    assert warnings == []
    assert list(runs.columns[: len(loading.RUN_COLUMNS)]) == list(loading.RUN_COLUMNS)
    assert len(runs) == 4
    failed = runs[runs["state"] == "failed"].iloc[0]
    assert np.isnan(failed["final_return"])
    assert "failed on purpose" in failed["reason"] and "at step 2000" in failed["reason"]
    assert runs.loc[runs["state"] == "complete", "reason"].eq("").all()
    assert runs.loc[runs["seed"] == 1, "final_return"].iloc[0] == FINALS[1]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "status.json").unlink(), "no status.json"),
        (lambda d: (d / "status.json").write_text('{"state": "comp'), "status.json is not valid JSON"),
        (lambda d: (d / "config.json").write_text("[1, 2"), "config.json is not valid JSON"),
        (lambda d: (d / "eval.csv").write_text("env_step,return_mean,return_std,episodes\n1000,-3"), "eval.csv"),
        (lambda d: (d / "diagnostics.csv").write_text("env_step,updates\n1000,5\n"), "diagnostics.csv lacks"),
        (lambda d: (d / "eval.csv").write_bytes(b"\xff\xfe\x00garbage"), "eval.csv"),
        (lambda d: (d / "status.json").write_text('{"state": "exploded", "env_steps": 1, "wall_s": 1}'), "state"),
    ],
)
def test_corrupt_folder_is_skipped_with_a_warning_naming_it(tmp_path: Path, damage, message: str) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", FINALS[:2])
    damage(records.run_dir(tmp_path, "Pendulum-v1", "reference", 1))
    runs, warnings = loading.load_runs(tmp_path)
    assert runs["seed"].tolist() == [0]
    assert len(warnings) == 1
    assert "runs/Pendulum-v1/reference/seed_1" in warnings[0] and message in warnings[0]


def test_config_that_disagrees_with_its_folder_is_skipped(tmp_path: Path) -> None:
    folder = write_run(tmp_path, "Pendulum-v1", "reference", 0)
    config = json.loads((folder / "config.json").read_text())
    config["seed"] = 5
    (folder / "config.json").write_text(json.dumps(config))
    runs, warnings = loading.load_runs(tmp_path)
    assert runs.empty and "seed_0" in warnings[0] and "seed" in warnings[0]


def test_eval_curves_and_diagnostics_are_loaded_per_run(tmp_path: Path) -> None:
    write_cell(tmp_path, "Pendulum-v1", "reference", FINALS[:2])
    write_run(tmp_path, "Pendulum-v1", "naive-tanh", 0, state="diverged")
    curves = loading.load_eval_curves(tmp_path)
    assert len(curves) == 2 * EVAL_POINTS + EVAL_POINTS // 2
    assert {"env", "variant", "seed", "env_step", "return_mean"} <= set(curves.columns)
    diagnostics = loading.load_diagnostics(tmp_path)
    means = stats.mean_diagnostics(diagnostics)
    last = means[(means["variant"] == "naive-tanh")].iloc[-1]
    assert np.isnan(last["critic_loss"])  # the non-finite value is left out, not averaged in
    assert means[(means["variant"] == "reference")]["critic_loss"].iloc[0] == pytest.approx(1.5)  # seeds 0, 1
