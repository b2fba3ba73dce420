"""The verdict matrix: read from reports' verdicts.csv, cells in words and a PNG, errors named."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from harness import cli
from harness.judging import verdict_matrix

ROW = {"reference": "reference", "mdd": 0.5, "n_pairs": 10}


def _report(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    pd.DataFrame([{**ROW, **r} for r in rows]).to_csv(folder / "verdicts.csv", index=False)
    return folder


def _row(env: str, variant: str, metric: str, verdict: str, difference: float, low: float, high: float) -> dict:
    return {
        "env": env,
        "variant": variant,
        "metric": metric,
        "verdict": verdict,
        "difference": difference,
        "ci_low": low,
        "ci_high": high,
    }


@pytest.fixture
def two_studies(tmp_path: Path) -> list[Path]:
    a = _report(
        tmp_path / "lander-100k",
        [
            _row("Lander", "fast", "final_return", "better", 0.44, 0.08, 0.80),
            _row("all", "fast", "final_return", "better", 0.44, 0.08, 0.80),  # the pooled row: not a study's
            _row("Lander", "slow", "final_return", "no detectable difference", 0.1, -0.3, 0.5),
            _row("Lander", "fast", "auc_return", "equivalent", 0.01, -0.02, 0.04),
            _row("Lander", "slow", "auc_return", "worse", -0.5, -0.8, -0.2),
        ],
    )
    b = _report(
        tmp_path / "walker-200k",
        [
            _row("Walker", "fast", "final_return", "too few runs", 0.0, float("nan"), float("nan")),
            {**_row("Walker", "slow", "final_return", "worse", -0.3, -0.6, -0.1), "reference": "fast"},  # not ours
            _row("Walker", "fast", "auc_return", "no detectable difference", 0.0, -0.1, 0.1),
        ],
    )
    return [a, b]


def test_cells_say_verdict_interval_and_seeds_and_open_says_its_mdd(two_studies: list[Path]) -> None:
    frame = verdict_matrix.verdict_frame(two_studies)
    assert sorted(set(frame["study"])) == ["lander-100k", "walker-200k"]
    assert "all" not in set(frame["env"]) and set(frame["reference"]) == {"reference"}
    lines = verdict_matrix.matrix_markdown(frame, "final_return")
    assert lines[0] == "| variant | Lander (lander-100k) | Walker (walker-200k) |"
    assert lines[2] == "| fast | better +0.44 [+0.08, +0.80], 10 seeds | open (MDD 0.50), 10 seeds |"
    assert lines[3] == "| slow | open (MDD 0.50), 10 seeds | - |"  # judged against another variant: left out
    auc = verdict_matrix.matrix_markdown(frame, "auc_return")
    assert auc[3] == "| slow | worse -0.50 [-0.80, -0.20], 10 seeds | - |"


def test_the_command_writes_the_png_and_markdown(two_studies: list[Path], tmp_path: Path) -> None:
    png, md = tmp_path / "m.png", tmp_path / "m.md"
    argv = ["verdict-matrix", *map(str, two_studies), "--out", str(png), "--markdown", str(md)]
    assert cli.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| fast | equivalent +0.01 [-0.02, +0.04], 10 seeds | open (MDD 0.50), 10 seeds |" in md.read_text()
    first = png.read_bytes()
    assert cli.main(argv) == 0 and png.read_bytes() == first  # the same verdicts, the same bytes


def test_the_command_counts_each_verdict(
    two_studies: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["verdict-matrix", *map(str, two_studies), "--out", str(tmp_path / "m.png")]) == 0
    assert "6 comparisons (1 better, 1 worse, 1 equivalent, 3 open)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "has no verdicts.csv"),
        ("env,variant\nLander,fast\n", "lacks the column(s) reference, metric"),
        ("\x00\xff\xfe garbage", "lacks the column"),
    ],
)
def test_a_folder_that_is_not_a_report_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, said: str
) -> None:
    folder = tmp_path / "notareport"
    folder.mkdir()
    if content is not None:
        (folder / "verdicts.csv").write_text(content)
    assert cli.main(["verdict-matrix", str(folder), "--out", str(tmp_path / "m.png")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "m.png").exists()


def test_a_narrow_interval_keeps_the_digits_that_say_its_side_of_zero(tmp_path: Path) -> None:
    # half-width 0.0025: three decimals, as the report's tables write it; with two, both bounds read 0.00
    study = _report(
        tmp_path / "pendulum", [_row("Pendulum", "same", "final_return", "equivalent", 0.0004, -0.0021, 0.0029)]
    )
    frame = verdict_matrix.verdict_frame([study])
    assert verdict_matrix.matrix_markdown(frame, "final_return")[2] == (
        "| same | equivalent +0.000 [-0.002, +0.003], 10 seeds |"
    )
    # a bound that would round to zero at its width's decimals gets one more: -0.004 stays below zero
    close = pd.Series(_row("Pendulum", "same", "final_return", "worse", -0.03, -0.0562, -0.0041) | ROW)
    assert verdict_matrix.cell_text(close) == "worse -0.030 [-0.056, -0.004], 10 seeds"


def test_a_sequential_grids_cells_come_from_its_looks(tmp_path: Path) -> None:
    # The fixed rule called everything open on seed counts the looks chose; the looks decided some.
    report = _report(
        tmp_path / "cheetah-100k",
        [
            _row("Cheetah", v, m, "no detectable difference", 0.0, -0.5, 0.5)
            for v in ("broken", "tied", "noisy", "early")
            for m in ("final_return", "auc_return")
        ],
    )
    looks = [
        ("broken", "worse", math.nan, math.nan, math.nan, 5, "failure", False),
        ("tied", "equivalent", 0.004, -0.02, 0.03, 10, "rule", False),
        ("noisy", "open", 0.06, -0.39, 0.51, 10, "rule", True),
        ("early", "open", -0.1, -0.6, 0.4, 5, "rule", False),
    ]
    pd.DataFrame(
        [
            {"env": "Cheetah", "variant": v, "metric": m, "verdict": verdict, "difference": d, "low": lo, "high": hi}
            | {"seeds": n, "look": 1, "basis": basis, "note": "", "stopped": stopped, "predictive_power": 0.03}
            for v, verdict, d, lo, hi, n, basis, stopped in looks
            for m in ("final_return", "auc_return")
        ]
    ).to_csv(report / "looks.csv", index=False)
    frame = verdict_matrix.verdict_frame([report])
    final = frame[frame["metric"] == "final_return"].set_index("variant")
    assert set(frame["rule"]) == {"sequential"}
    assert verdict_matrix.cell_text(final.loc["broken"]) == "worse (every run failed), 5 seeds"
    assert verdict_matrix.cell_text(final.loc["tied"]) == "equivalent +0.00 [-0.02, +0.03], 10 seeds"
    assert verdict_matrix.cell_text(final.loc["noisy"]) == "open +0.06 [-0.39, +0.51], stopped for futility, 10 seeds"
    assert verdict_matrix.cell_text(final.loc["early"]) == "open -0.10 [-0.60, +0.40], 5 seeds"
    assert "| variant | Cheetah (cheetah-100k, sequential looks) |" in verdict_matrix.matrix_markdown(
        frame, "final_return"
    )
    assert verdict_matrix.matrix_png(frame)[:8] == b"\x89PNG\r\n\x1a\n"
    (report / "looks.csv").write_text("env,variant\nCheetah,tied\n")
    with pytest.raises(verdict_matrix.MatrixError, match="looks.csv lacks the column"):
        verdict_matrix.verdict_frame([report])
