"""Training episodes per window (harness.judging.episodes), on hand-written train.csv files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_stats import write_run

from harness import records
from harness.judging import episodes, loading

# Pendulum-v1's registered time limit is 200 steps.
REFERENCE_EPISODES = {
    0: [(200, -1000.0, 200), (350, -600.0, 150), (550, -300.0, 200)],
    1: [(100, -1200.0, 100), (300, -900.0, 200), (400, -100.0, 100)],
}


def write_results(root: Path) -> None:
    for seed, rows in REFERENCE_EPISODES.items():
        folder = write_run(root, "Pendulum-v1", "reference", seed)
        records.write_csv(folder / "train.csv", records.TRAIN_COLUMNS, rows)
    folder = write_run(root, "Pendulum-v1", "critic-first", 0, state="failed")
    records.write_csv(folder / "train.csv", records.TRAIN_COLUMNS, [])  # failed before an episode ended


def test_episode_windows_on_hand_computed_episodes(tmp_path: Path) -> None:
    write_results(tmp_path)
    data = loading.scan_results(tmp_path)
    train = episodes.read_train(data)
    assert len(train) == 6 and set(train["variant"]) == {"reference"}  # the failed run ended no episode
    assert episodes.time_limits(data.configs) == {"Pendulum-v1": 200}
    table = episodes.episode_windows(train, 300, {"Pendulum-v1": 200})
    assert list(table.columns) == list(episodes.WINDOW_COLUMNS)
    # Window [0, 300): episodes ending at 200 (s0), 100 and 300 (s1; 300 ended in this window).
    first, second = table.iloc[0], table.iloc[1]
    assert (first["window_start"], first["window_end"], first["n_runs"], first["episodes"]) == (0, 300, 2, 3)
    assert first["return_median"] == -1000.0 and first["length_median"] == 200.0
    assert first["at_time_limit"] == pytest.approx(2 / 3)
    # Window [300, 600): 350 and 550 (s0), 400 (s1).
    assert (second["window_start"], second["n_runs"], second["episodes"]) == (300, 2, 3)
    assert second["return_median"] == -300.0 and second["length_median"] == 150.0
    assert second["at_time_limit"] == pytest.approx(1 / 3)
    assert np.isnan(episodes.episode_windows(train, 300, {})["at_time_limit"]).all()  # no limit known
    with pytest.raises(ValueError, match="window"):
        episodes.episode_windows(train, 0, {})


def test_train_is_read_from_each_runs_own_folder_when_folders_are_read_together(tmp_path: Path) -> None:
    write_results(tmp_path / "campaign")
    study = write_run(tmp_path / "study", "Pendulum-v1", "ref-xavier", 0)
    records.write_csv(study / "train.csv", records.TRAIN_COLUMNS, [(200, -800.0, 200)])
    data = loading.scan_many([tmp_path / "campaign", tmp_path / "study"])
    assert data.folders[("Pendulum-v1", "ref-xavier", 0)] == study
    train = episodes.read_train(data)
    assert train.groupby("variant")["episode_return"].sum().to_dict() == {"reference": -4100.0, "ref-xavier": -800.0}
    only = episodes.read_train(data.only(["ref-xavier"]))
    assert list(only["episode_return"]) == [-800.0]


def test_the_command_prints_the_table_and_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_results(tmp_path)
    assert episodes.main([str(tmp_path), "--window", "300"]) == 0
    out = capsys.readouterr().out
    assert "Pendulum-v1 (time limit: 200 steps)" in out
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("reference")]
    assert lines == [
        ["reference", "0-300", "2", "3", "-1000.0", "200", "67%"],
        ["reference", "300-600", "2", "3", "-300.0", "150", "33%"],
    ]
    assert episodes.main([str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert episodes.main([str(tmp_path), "--window", "0"]) == 2
    assert "--window must be >= 1" in capsys.readouterr().err
    assert episodes.main([str(tmp_path), "--variants", "naive-tanh"]) == 2  # no run of it
    assert "no finished run" in capsys.readouterr().err
