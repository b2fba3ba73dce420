import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "args, names",
    [
        (["run", "--variants", "nope"], "reference, naive-tanh"),
        (
            ["run", "--variants", "reference", "--envs", "CartPole-v1"],
            "CartPole-v1: the action space is Discrete(2), not a Box",
        ),
        (["run", "--variants", "reference", "--envs", "NoSuchEnv-v0"], "Environment `NoSuchEnv` doesn't exist"),
        (["run", "--variants", "reference", "--profile", "huge"], "smoke, ci, quick, full"),
        (["run", "--variants", "reference", "--seeds", "0"], "--seeds must be >= 1"),
        (["run", "--variants", "reference", "--steps", "0"], "--steps must be >= 1"),
        (["run", "--variants", "reference", "--steps", "ten"], "whole number"),
        (["run", "--variants", "reference", "--set", "gama=0.9"], "valid fields: log_prob"),
        (["run", "--variants", "reference", "--set", "gamma=high"], "expected float"),
        (
            ["run", "--variants", "reference", "--set", "update_order=random"],
            "sequential, joint, policy-first, critic-first",
        ),
        (
            [
                "run",
                "--variants",
                "reference",
                "--envs",
                "Pendulum-v1",
                "--profile",
                "smoke",
                "--set",
                "batch_size=100000000",
            ],
            "exceeds the 1200 transitions the run can collect",
        ),
        (
            [
                "run",
                "--variants",
                "reference",
                "--envs",
                "Pendulum-v1",
                "--profile",
                "smoke",
                "--set",
                "learning_starts=1200",
            ],
            "learning_starts=1200 is not below the run's 1200 env steps",
        ),
        (["frobnicate"], "invalid choice"),
        (["report", "/nonexistent/results"], "results folder /nonexistent/results does not exist"),
        (["report", str(ROOT / "README.md")], f"results folder {ROOT / 'README.md'} is a file, not a folder"),
        (
            ["check", "--results", str(ROOT / "README.md")],
            f"results folder {ROOT / 'README.md'} is a file, not a folder",
        ),
        (["check", "--results", "/nonexistent/results"], "check: results folder /nonexistent/results does not exist"),
        (["status", "/nonexistent/results"], "status: results folder /nonexistent/results does not exist"),
        (["status", str(ROOT / "README.md")], f"status: results folder {ROOT / 'README.md'} is a file, not a folder"),
        (
            ["export", "/nonexistent/results", "--format", "torchscript"],
            "export: results folder /nonexistent/results does not exist",
        ),
        (
            ["export", str(ROOT / "README.md"), "--format", "torchscript"],
            f"export: results folder {ROOT / 'README.md'} is a file, not a folder",
        ),
        (
            ["report", str(ROOT / "results" / "pendulum-20k"), "--out", "/proc/sacbench-report"],
            "cannot write the report to /proc/sacbench-report: No such file or directory",
        ),
        (["run", "--variants", "reference", "--report-every", "-5"], "--report-every must be >= 0, got '-5'"),
        (["check", "--tolerance", "nan"], "--tolerance must be >= 0, got 'nan'"),
        (
            ["check", "--results", str(ROOT / "results" / "pendulum-20k")],
            "runs were trained on another budget (diag_every 1000, eval_episodes 10, eval_every 1000, eval_points 20, "
            "total_steps 20000) than the baseline's (diag_every 500, eval_episodes 5, eval_every 250",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, names, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and "Traceback" not in err


def test_unwritable_results_folder(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", "--variants", "reference", "--envs", "Pendulum-v1", "--out", str(blocker / "sub")]) == 2
    assert "cannot write to results folder" in capsys.readouterr().err


def test_list_shows_every_variant_with_its_differences():
    out = run_cli("list")
    assert out.returncode == 0
    for name in (
        "reference",
        "naive-tanh",
        "joint-update",
        "policy-first",
        "critic-first",
        "alpha-loss",
        "reward-scaled",
        "sac-auto",
        "blog-sac2",
    ):
        assert f"  {name}" in out.stdout
    assert "fields: log_prob=naive" in out.stdout and "BipedalWalker-v3" in out.stdout and "quick" in out.stdout


def test_run_writes_records_skips_finished_runs_and_refuses_a_changed_config(tmp_path):
    out = tmp_path / "grid"
    args = [
        "run",
        "--variants",
        "reference,critic-first",
        "--envs",
        "Pendulum-v1",
        "--seeds",
        "2",
        "--steps",
        "300",
        "--profile",
        "smoke",
        "--workers",
        "2",
        "--set",
        "learning_starts=100",
        "--set",
        "hidden_sizes=32,32",
        "--out",
        str(out),
        "--no-report",
    ]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs.columns) == [
        "env",
        "variant",
        "seed",
        "state",
        "final_return",
        "auc_return",
        "env_steps",
        "wall_s",
    ]
    assert sorted(zip(runs.variant, runs.seed, runs.state)) == [
        ("critic-first", 0, "failed"),
        ("critic-first", 1, "failed"),
        ("reference", 0, "complete"),
        ("reference", 1, "complete"),
    ]
    config = json.loads((out / "runs/Pendulum-v1/reference/seed_1/config.json").read_text())
    assert config["overrides"] == {"learning_starts": 100, "hidden_sizes": [32, 32]}
    assert config["command"][:4] == ["python", "-m", "harness", "run"]

    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*") if p.is_file()}
    again = run_cli(*args)
    assert again.returncode == 0 and "4 already finished, 0 jobs" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("*") if p.is_file()} == before

    changed = run_cli(*[a if a != "learning_starts=100" else "learning_starts=50" for a in args])
    assert changed.returncode == 2 and "different configuration" in changed.stderr
    assert len(changed.stderr.strip().splitlines()) == 1

    strict = run_cli(*args, "--strict")
    assert strict.returncode == 1  # critic-first failed


def test_a_reader_that_stops_early_gets_no_traceback():
    proc = subprocess.run(
        f"{sys.executable} -m harness run --variants all --envs Pendulum-v1 --seeds 30 --dry-run "
        f"--out {ROOT / 'results' / 'pendulum-20k'} | head -1",
        shell=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.startswith("grid: ") and len(proc.stdout.splitlines()) == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


# Runs a command line in a fresh interpreter, then prints whether torch was imported on the way.
_TORCH_PROBE = """
import sys
from harness.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --help
    code = exc.code
print(f"exit={code} torch={'torch' in sys.modules}")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["report", "--help"],
        ["status", "--help"],
        ["status", "results/baselines/ci"],
        ["list"],
        ["check", "--results", "results/baselines/ci"],
    ],
)
def test_reading_commands_import_no_torch(args):
    # Reading run records must not pay for importing the training code (seconds), nor need it installed.
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.stdout.strip().splitlines()[-1] == "exit=0 torch=False", proc.stderr


def test_training_commands_still_reach_torch(tmp_path):
    # The probe above is not vacuous: a command that trains (here a dry run, which resolves the device) does.
    run = ["run", "--variants", "reference", "--envs", "Pendulum-v1", "--dry-run", "--out", str(tmp_path / "grid")]
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_PROBE, *run],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip().splitlines()[-1] == "exit=0 torch=True", proc.stderr
