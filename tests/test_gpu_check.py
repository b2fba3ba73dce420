"""`python -m harness gpu-check`: what can be tested without a GPU (the whole command, at smoke sizes on
the CPU, ran by hand: `python -m harness gpu-check --out DIR --device cpu --sizes smoke`, 58 s)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.running import gpu_check

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_stops_at_once_with_one_line_and_exit_2(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "gpu-check", "--out", str(tmp_path / "gc")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no CUDA device" in proc.stderr
    assert not (tmp_path / "gc").exists()
    assert time.monotonic() - start < 30  # the interpreter and torch's import, nothing run


def test_unknown_step_is_a_usage_error(tmp_path, capsys):
    assert main(["gpu-check", "--out", str(tmp_path), "--device", "cpu", "--only", "environment,warp"]) == 2
    assert "unknown step warp" in capsys.readouterr().err


def test_cpu_smoke_steps_write_their_figures(tmp_path, capsys):
    out = tmp_path / "gc"
    assert (
        main(
            [
                "gpu-check",
                "--out",
                str(out),
                "--device",
                "cpu",
                "--sizes",
                "smoke",
                "--only",
                "environment,independence",
            ]
        )
        == 0
    )
    report = (out / gpu_check.REPORT).read_text()
    assert "== environment: ok" in report and f"torch {torch.__version__}" in report
    # on the CPU every member equals its seed alone, in both precisions
    assert "fp32: 3 of 3 members bit-identical" in report and "bf16: 3 of 3 members bit-identical" in report
    assert report.rstrip().endswith("== all steps passed")
    assert "== tests" not in report and "== bench" not in report


def test_a_step_past_its_limit_is_stopped_and_fails(tmp_path):
    ctx = gpu_check.Context(tmp_path, "cpu", gpu_check.SIZES["smoke"], time.monotonic() + 1.5)
    start = time.monotonic()
    result = gpu_check._command(ctx, "bench", ["-c", "import time; time.sleep(60)"])
    assert not result.ok and any("timed out" in line for line in result.lines)
    assert time.monotonic() - start < 20


def test_step_commands_run_from_the_repository_root(tmp_path):
    # `python -m harness` and `pytest tests` resolve against the working directory; where the package is
    # not installed (a GPU machine given only the checkout), any other directory fails.
    ctx = gpu_check.Context(tmp_path, "cpu", gpu_check.SIZES["smoke"], time.monotonic() + 60)
    result = gpu_check._command(ctx, "bench", ["-c", "import os; print(os.getcwd())"])
    assert result.ok and Path(result.lines[-1]) == ROOT


def test_steps_not_reached_within_the_budget_are_reported_as_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "BUDGET_S", 0.0)
    lines = []
    assert gpu_check.run_gpu_check(tmp_path, "cpu", "smoke", ["environment", "grid"], echo=lines.append) == 1
    report = (tmp_path / gpu_check.REPORT).read_text()
    assert report.count("not run: the 0 s budget was spent") == 2
    assert "failed: environment, grid" in report
