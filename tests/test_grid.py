import dataclasses
import errno
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_stats import write_run

from harness import machine, records
from harness.cli import main
from harness.running import grid
from harness.running.profiles import budget_for
from harness.running.train import Job, checkpoint_path, checkpoint_previous, train_job
from variants import CATALOG

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "learning_starts=100", "--set", "hidden_sizes=32,32", "--set", "batch_size=64"]


def grid_args(out, steps=300, seeds=2, *extra):
    return [
        "run",
        "--variants",
        "reference",
        "--envs",
        "Pendulum-v1",
        "--seeds",
        str(seeds),
        "--steps",
        str(steps),
        "--profile",
        "smoke",
        "--out",
        str(out),
        "--no-report",
        *SMALL,
        *extra,
    ]


def run_files(out, name="eval.csv"):
    return {p.relative_to(out): p.read_bytes() for p in sorted(Path(out).glob(f"runs/*/*/seed_*/{name}"))}


# 4 members put the critics' output biases (2 per member) into the vectorised loop of fused Adam; 9
# members put log-alpha there too and the biases into that of lerp and foreach Adam (see MEMBER_ALIGN).
# LunarLander's episodes terminate, at different steps for different members.
@pytest.mark.parametrize(
    "env_id, seeds, steps",
    [
        ("Pendulum-v1", (0, 1, 2, 3), 400),
        ("Pendulum-v1", tuple(range(9)), 400),
        ("LunarLanderContinuous-v3", (0, 1, 2, 3, 4), 1000),
    ],
)
def test_batched_members_equal_separate_runs_bit_for_bit(tmp_path, env_id, seeds, steps):
    entry = CATALOG["reference"]
    spec = dataclasses.replace(entry.spec, learning_starts=100, hidden_sizes=(32, 32), batch_size=64)
    budget = budget_for("smoke", env_id, steps)
    train_job(Job("reference", "", spec, {}, env_id, seeds, budget, str(tmp_path / "batched")))
    for seed in seeds:
        train_job(Job("reference", "", spec, {}, env_id, (seed,), budget, str(tmp_path / "single")))
    for name in ("eval.csv", "train.csv", "diagnostics.csv"):
        batched, single = run_files(tmp_path / "batched", name), run_files(tmp_path / "single", name)
        assert len(batched) == len(seeds) and batched == single, name
    if env_id.startswith("LunarLander"):  # episodes did end by termination, before the time limit
        lengths = [
            int(line.split(",")[2])
            for data in run_files(tmp_path / "single", "train.csv").values()
            for line in data.decode().splitlines()[1:]
        ]
        assert lengths and max(lengths) < 1000


def test_sigkilled_grid_resumes_to_the_same_eval_curve(tmp_path):
    whole = subprocess.run(
        [sys.executable, "-m", "harness", *grid_args(tmp_path / "whole", 2000, 1, "--workers", "1")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert whole.returncode == 0, whole.stderr
    args = [sys.executable, "-m", "harness", *grid_args(tmp_path / "killed", 2000, 1, "--workers", "1")]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = tmp_path / "killed/checkpoints/Pendulum-v1/reference/seeds_0.pt"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if torch.load(ckpt, weights_only=True)["step"] >= 1000:
                break
        except (OSError, RuntimeError, EOFError, KeyError):
            pass
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed/runs/Pendulum-v1/reference/seed_0/status.json").exists()  # killed mid-run
    resumed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert run_files(tmp_path / "killed") == run_files(tmp_path / "whole")
    assert not ckpt.exists()


def test_ray_backend_gives_the_local_curves(tmp_path, capsys):
    pytest.importorskip("ray")
    assert main(grid_args(tmp_path / "local", 300, 2, "--workers", "1")) == 0
    assert main(grid_args(tmp_path / "ray", 300, 2, "--backend", "ray")) == 0
    local, ray = run_files(tmp_path / "local"), run_files(tmp_path / "ray")
    assert len(local) == 2 and local == ray


def test_ray_backend_without_ray_says_how_to_install(tmp_path, monkeypatch, capsys):
    from harness.running import ray_backend

    monkeypatch.setattr(ray_backend, "ray_available", lambda: False)
    assert main(grid_args(tmp_path) + ["--backend", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and 'pip install -e ".[ray]"' in err


def test_full_disk_is_one_line_exit_2_and_leaves_no_temp_files(tmp_path, monkeypatch, capsys):
    real_replace = os.replace

    def full_disk(src, dst):
        if str(dst).endswith("eval.csv"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(records.os, "replace", full_disk)
    assert main(grid_args(tmp_path / "g", 200, 1, "--workers", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "No space left on device" in err and "Traceback" not in err
    assert not list((tmp_path / "g").rglob("*.tmp"))
    assert not list((tmp_path / "g").rglob("status.json"))  # nothing claims to be finished


def test_progress_lines_when_not_a_terminal(tmp_path):
    lines = []
    job = Job(
        "reference",
        "",
        CATALOG["reference"].spec,
        {},
        "Pendulum-v1",
        (0, 1),
        budget_for("smoke", "Pendulum-v1", 100),
        str(tmp_path),
    )
    progress = grid.Progress([job], log=lines.append, every=0.0, stream=io.StringIO())
    progress.steps(50, 2)
    progress.finished(
        [
            {
                "env": "Pendulum-v1",
                "variant": "reference",
                "seed": 0,
                "state": "complete",
                "final_return": -150.0,
                "env_steps": 100,
                "wall_s": 2.0,
            }
        ]
    )
    assert lines[0].startswith("[status] 0/2 runs done, 100/200 env steps")
    assert lines[1] == "[1/2] Pendulum-v1 reference seed 0: complete, final_return -150.0, 50 steps/s"


def test_two_grids_probing_one_results_folder_do_not_trip_each_other(tmp_path, monkeypatch):
    # The interleaving that once failed a second grid started beside a first on the same folder: grid B
    # writes and removes its probe between grid A's write and A's removal.
    real_write, real_getpid = records.atomic_write_bytes, os.getpid
    nested = []

    def write_then_other_grid_probes(path, data):
        real_write(path, data)
        if not nested:
            nested.append(True)
            monkeypatch.setattr(grid.os, "getpid", lambda: real_getpid() + 1)
            nested.append(grid.check_writable(tmp_path))
            monkeypatch.setattr(grid.os, "getpid", real_getpid)

    monkeypatch.setattr(records, "atomic_write_bytes", write_then_other_grid_probes)
    assert grid.check_writable(tmp_path) is None
    assert nested == [True, None]
    assert list(tmp_path.iterdir()) == []


def test_a_bf16_grid_on_a_cpu_without_native_bf16_is_warned_about_and_still_run(tmp_path, monkeypatch, capsys):
    def args(out):
        return [
            "run",
            "--variants",
            "reference,bf16",
            "--envs",
            "Pendulum-v1",
            "--seeds",
            "1",
            "--steps",
            "150",
            "--profile",
            "smoke",
            "--out",
            str(out),
            "--no-report",
            "--workers",
            "1",
            "--set",
            "learning_starts=100",
            "--set",
            "batch_size=16",
        ]

    monkeypatch.setattr(machine, "cpu_info", lambda: ("Some AVX2 CPU", frozenset({"avx2", "fma"})))
    assert main(args(tmp_path / "res")) == 0
    printed = capsys.readouterr().out
    assert "warning: 1 job(s) train in bf16, but this CPU (Some AVX2 CPU) has neither AVX512_BF16 nor AMX" in printed
    assert {r["variant"]: r["state"] for r in records.collect_runs(tmp_path / "res")}["bf16"] == "complete"
    config = records.read_json(records.run_dir(tmp_path / "res", "Pendulum-v1", "bf16", 0) / "config.json")
    assert config["platform"]["cpu"] == "Some AVX2 CPU" and config["platform"]["native_bf16"] == "false"
    monkeypatch.setattr(machine, "cpu_info", lambda: ("Some AMX CPU", frozenset({"avx2", "amx_bf16"})))
    assert main(args(tmp_path / "again")) == 0
    assert "warning" not in capsys.readouterr().out


def test_a_run_another_process_is_training_is_left_to_it(tmp_path, capsys):
    out = tmp_path / "g"
    other = records.try_lock_run(out, "Pendulum-v1", "reference", 1)  # as another grid's worker holds it
    assert other is not None and records.try_lock_run(out, "Pendulum-v1", "reference", 1) is None
    try:
        assert main(grid_args(out, 300, 2, "--workers", "1")) == 0
        printed = capsys.readouterr().out
        assert "(0 already finished, 1 being trained by another process, 1 jobs of up to 1 seeds" in printed
        assert [p.parent.name for p in out.glob("runs/*/*/seed_*/status.json")] == ["seed_0"]
        assert not records.run_dir(out, "Pendulum-v1", "reference", 1).exists()  # not touched
        # --fresh would discard the run the other process is writing: refused, nothing deleted.
        assert main(grid_args(out, 300, 2, "--workers", "1", "--fresh")) == 2
        err = capsys.readouterr().err
        assert f"Pendulum-v1 reference seed 1 is being trained by another process (pid {os.getpid()})" in err
        assert (records.run_dir(out, "Pendulum-v1", "reference", 0) / "status.json").exists()
    finally:
        other.release()
    assert main(grid_args(out, 300, 2, "--workers", "1")) == 0  # once it is free, the rerun trains it
    assert "(1 already finished, 1 jobs" in capsys.readouterr().out
    assert len(list(out.glob("runs/*/*/seed_*/status.json"))) == 2


def test_a_dry_run_lists_the_runs_left_in_grid_order_and_touches_nothing(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(grid_args(out, 300, 3, "--dry-run")) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "grid: 1 variants x 1 envs x 3 seeds = 3 runs; would train, in this order:"
    assert [line.strip() for line in printed[1:4]] == [
        f"Pendulum-v1  reference  seed {k}  (300 steps)" for k in range(3)
    ]
    assert printed[4].startswith("dry run: 3 jobs (0 already finished, up to 1 seeds a job")
    assert not out.exists()  # planned without writing: no folder, no lock file
    assert main(grid_args(out, 300, 1, "--workers", "1")) == 0
    other = records.try_lock_run(out, "Pendulum-v1", "reference", 2)  # another grid trains seed 2
    try:
        capsys.readouterr()
        assert main(grid_args(out, 300, 3, "--dry-run")) == 0
        printed = capsys.readouterr().out
    finally:
        other.release()
    assert "dry run: 1 jobs (1 already finished, 1 being trained by another process," in printed
    assert printed.splitlines()[-2].strip() == "Pendulum-v1  reference  seed 1  (300 steps)"
    assert sorted(p.name for p in out.glob("runs/*/*/seed_*")) == ["seed_0"]  # nothing trained
    assert main(grid_args(out, 300, 1, "--dry-run")) == 0
    assert "nothing to train" in capsys.readouterr().out
    assert main(grid_args(out, 300, 1, "--dry-run", "--fresh")) == 2
    assert "--dry-run with --fresh" in capsys.readouterr().err


def test_a_job_trains_only_the_seeds_still_free_when_it_starts(tmp_path):
    # Planned with seeds 0-2; before the job starts, another grid claims seed 0 and finishes seed 1.
    job = Job(
        "reference",
        "",
        CATALOG["reference"].spec,
        {},
        "Pendulum-v1",
        (0, 1, 2),
        budget_for("smoke", "Pendulum-v1", 100),
        str(tmp_path),
    )
    other = records.try_lock_run(tmp_path, "Pendulum-v1", "reference", 0)
    write_run(tmp_path, "Pendulum-v1", "reference", 1)  # finished by another grid, its records agreeing
    try:
        with grid.claimed(job) as (mine, left_out):
            assert mine is not None and mine.seeds == (2,)
            assert records.try_lock_run(tmp_path, "Pendulum-v1", "reference", 2) is None  # held while it trains
        assert left_out == [
            f"Pendulum-v1 reference seed 0: left to another process that is training it (pid {os.getpid()})",
            "Pendulum-v1 reference seed 1: finished by another process since this grid was planned; kept as it is",
        ]
        free = records.try_lock_run(tmp_path, "Pendulum-v1", "reference", 2)  # released with the block
        assert free is not None
        free.release()
        lines = []
        progress = grid.Progress([job], log=lines.append, stream=io.StringIO())
        progress.left_out(grid.JobOutcome(job, [], left_out))
        assert (progress.total_runs, progress.total_steps) == (1, 100) and lines == left_out
    finally:
        other.release()


def test_status_tells_finished_training_and_stopped_runs(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(grid_args(out, 300, 1, "--workers", "1")) == 0
    capsys.readouterr()
    for seed in (1, 2):  # two unfinished run folders: seed 1 is being trained by a process, seed 2 was stopped
        folder = records.run_dir(out, "Pendulum-v1", "reference", seed)
        records.write_json(folder / "config.json", {"budget": {"total_steps": 300}})
    records.write_csv(
        records.run_dir(out, "Pendulum-v1", "reference", 1) / "diagnostics.csv",
        ("env_step", "updates"),
        [(100, 0), (200, 100)],
    )
    training = records.try_lock_run(out, "Pendulum-v1", "reference", 1)
    queue = records.hold_queue(out, [("Pendulum-v1", "reference", s) for s in (0, 1, 2, 3)])  # seed 0 is finished
    try:
        assert main(["status", str(out)]) == 0
    finally:
        training.release()
        queue.release()
    printed = capsys.readouterr().out
    assert "still to come: 3 runs queued by 1 grid(s) running on this folder" in printed
    assert "1 complete, 1 stopped, 1 training" in printed
    assert f"training: Pendulum-v1 reference seed 1 (pid {os.getpid()}): 200 of 300 env steps recorded" in printed
    assert (
        "stopped: Pendulum-v1 reference seed 2 (rerun its grid's command to resume it" in printed
    )  # no diagnostics yet
    (tmp_path / "empty").mkdir()
    assert main(["status", str(tmp_path / "empty")]) == 2  # a folder, but no runs/ in it
    assert f"no run folders in {tmp_path / 'empty'}" in capsys.readouterr().err


def test_a_claim_held_for_an_instant_by_a_probe_is_still_won(tmp_path):
    # `harness status` or another grid's planning holds a run's lock only while it probes it.
    import threading

    probe = records.try_lock_run(tmp_path, "Pendulum-v1", "reference", 0)
    threading.Timer(records.CLAIM_RETRY_S / 2, probe.release).start()
    lock = records.claim_run(tmp_path, "Pendulum-v1", "reference", 0)
    assert lock is not None
    lock.release()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_stop_after_starts_no_run_that_would_end_past_the_limit(tmp_path, capsys, workers):
    out = tmp_path / "g"
    args = grid_args(out, 300, 1, "--workers", "1")
    args[args.index("reference")] = "reference,naive-tanh"
    assert main(args) == 0
    # Say naive-tanh's run took a day: its next seed is then expected to take as long; the reference's
    # is expected from its own run.
    status = records.run_dir(out, "Pendulum-v1", "naive-tanh", 0) / "status.json"
    records.write_json(status, {**records.read_json(status), "wall_s": 86_400.0})
    capsys.readouterr()
    args = grid_args(out, 300, 2, "--workers", workers, "--stop-after", "30")
    args[args.index("reference")] = "reference,naive-tanh"
    assert grid.job_seconds([]) == []
    assert main(args) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "Pendulum-v1 naive-tanh seed 1: not started: its expected 1440 min would end past --stop-after" in text
    assert records.run_state(records.run_dir(out, "Pendulum-v1", "reference", 0)) == "complete"
    assert records.run_state(records.run_dir(out, "Pendulum-v1", "reference", 1)) == "complete"
    assert not records.run_dir(out, "Pendulum-v1", "naive-tanh", 1).exists()  # a rerun trains it


@pytest.mark.parametrize("workers", ["1", "2"])
def test_stop_after_trains_the_seeds_of_a_job_that_fit_as_a_smaller_job(tmp_path, capsys, workers):
    # Seed 0 took 20 min (its status.json says so): the 2-member job of seeds 1-2, expected 40 min, would
    # end past a 30-min limit, so seed 1 trains alone and seed 2 waits for a rerun.
    out = tmp_path / "g"
    assert main(grid_args(out, 300, 1, "--workers", "1")) == 0
    status = records.run_dir(out, "Pendulum-v1", "reference", 0) / "status.json"
    records.write_json(status, {**records.read_json(status), "wall_s": 1200.0})
    capsys.readouterr()
    assert main(grid_args(out, 300, 3, "--workers", workers, "--members", "2", "--stop-after", "30")) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "Pendulum-v1 reference seed 2: not started: its expected 40 min would end past --stop-after" in text
    assert "seed 1: not started" not in text
    assert records.run_state(records.run_dir(out, "Pendulum-v1", "reference", 1)) == "complete"
    assert records.read_json(records.run_dir(out, "Pendulum-v1", "reference", 1) / "config.json")["members"] == 1
    assert not records.run_dir(out, "Pendulum-v1", "reference", 2).exists()  # a rerun trains it


def test_stop_after_estimates_each_run_as_it_starts_from_the_runs_finished_since(tmp_path, capsys, monkeypatch):
    # Planned at 15 ms a step, seed 0 fits the limit; it then takes a day (its status.json says so), and
    # seed 1, estimated as it is about to start, no longer fits.
    out = tmp_path / "g"
    real = grid.train_claimed

    def a_day_long(job, on_progress, should_stop):
        outcome = real(job, on_progress, should_stop)
        for seed in job.seeds:
            status = records.run_dir(out, job.env_id, job.variant, seed) / "status.json"
            records.write_json(status, {**records.read_json(status), "wall_s": 86_400.0})
        return outcome

    monkeypatch.setattr(grid, "train_claimed", a_day_long)
    assert main(grid_args(out, 300, 2, "--workers", "1", "--stop-after", "30")) == 0
    printed = capsys.readouterr()
    assert "Pendulum-v1 reference seed 1: not started: its expected 1440 min would end past --stop-after" in (
        printed.out + printed.err
    )
    assert records.run_state(records.run_dir(out, "Pendulum-v1", "reference", 0)) == "complete"
    assert not records.run_dir(out, "Pendulum-v1", "reference", 1).exists()


def test_job_seconds_count_a_batched_runs_wall_time_once_over_its_members(tmp_path):
    # Each member of a 4-member job records the job's 400 s; a seed alone took 120 s.
    budget = budget_for("smoke", "Pendulum-v1", 300)
    for seed, wall, members in ((0, 400.0, 4), (1, 400.0, 4), (2, 400.0, 4), (3, 400.0, 4), (4, 120.0, 1)):
        folder = records.run_dir(tmp_path, "Pendulum-v1", "reference", seed)
        records.write_json(folder / "status.json", {"state": "complete", "env_steps": 300, "wall_s": wall})
        records.write_json(folder / "config.json", {"members": members, "budget": {"total_steps": 300}})
    job = Job("reference", "", CATALOG["reference"].spec, {}, "Pendulum-v1", (5, 6), budget, str(tmp_path))
    assert grid.job_seconds([job]) == [200.0]  # median of 100, 100, 100, 100, 120 s a seed, times 2 seeds


def test_job_seconds_are_the_median_wall_time_of_complete_else_failed_runs_else_15_ms_a_step(tmp_path):
    budget = budget_for("smoke", "Pendulum-v1", 300)
    for seed, wall in enumerate((100.0, 300.0, 200.0)):
        records.write_json(
            records.run_dir(tmp_path, "Pendulum-v1", "reference", seed) / "status.json",
            {"state": "complete", "env_steps": 300, "wall_s": wall},
        )
    records.write_json(
        records.run_dir(tmp_path, "Pendulum-v1", "reference", 3) / "status.json",
        {"state": "failed", "env_steps": 10, "wall_s": 1.0},
    )  # not a full run's time
    # A variant whose every run failed (critic-first raises at its first update) is expected to fail as
    # fast, but only from failed runs of the same budget.
    for variant, seed, wall, total in (
        ("critic-first", 0, 0.5, 300),
        ("critic-first", 1, 1.5, 300),
        ("critic-first", 2, 9.0, 600),
        ("naive-tanh", 0, 2.0, 600),
    ):
        folder = records.run_dir(tmp_path, "Pendulum-v1", variant, seed)
        records.write_json(folder / "status.json", {"state": "failed", "env_steps": 101, "wall_s": wall})
        records.write_json(folder / "config.json", {"budget": {"total_steps": total}})

    def job(variant, seeds):
        return Job(
            variant,
            "",
            CATALOG[variant].spec,
            {},
            "Pendulum-v1",
            seeds,
            budget,  # noqa: E731
            str(tmp_path),
        )

    assert grid.job_seconds(
        [job("reference", (4,)), job("reference", (5, 6)), job("naive-tanh", (1,)), job("critic-first", (3, 4))]
    ) == [200.0, 400.0, pytest.approx(300 * grid.SECONDS_PER_MEMBER_STEP), 2.0]
    assert grid.too_late(job("reference", (4,)), 200.0, time.time() + 1000) == []
    assert grid.too_late(job("reference", (4,)), 200.0, time.time() + 100) == [
        "Pendulum-v1 reference seed 4: not started: its expected 3 min would end past --stop-after "
        "(a rerun of the same command trains it)"
    ]


def test_a_stopped_grid_says_where_each_stopped_run_resumes(tmp_path, monkeypatch):
    job = Job(
        "reference",
        "",
        dataclasses.replace(CATALOG["reference"].spec, learning_starts=50, batch_size=32, hidden_sizes=(16, 16)),
        {},
        "Pendulum-v1",
        (0,),
        budget_for("smoke", "Pendulum-v1", 300),
        str(tmp_path),
    )
    real = grid.train_claimed

    def stopped_midway(job, on_progress, should_stop):
        calls = iter(range(10_000))
        return real(job, on_progress, lambda: next(calls) == 120)

    monkeypatch.setattr(grid, "train_claimed", stopped_midway)
    lines = []
    with pytest.raises(grid.Interrupted):
        grid.execute([job], 1, log=lines.append)
    assert lines == [
        "interrupted: Pendulum-v1/reference/seeds 0 stopped at env step 120; "
        "a rerun resumes it there from its checkpoint"
    ]
    assert not (records.run_dir(tmp_path, "Pendulum-v1", "reference", 0) / "status.json").exists()


def stopped_at_step_120(out: Path, monkeypatch, seeds: tuple[int, ...]) -> Job:
    """A small reference job of `seeds` (300 env steps) in `out`, interrupted at env step 120: its
    checkpoint and partial run folders are left, as a stopped grid leaves them."""
    spec = dataclasses.replace(CATALOG["reference"].spec, learning_starts=50, batch_size=32, hidden_sizes=(16, 16))
    job = Job("reference", "", spec, {}, "Pendulum-v1", seeds, budget_for("smoke", "Pendulum-v1", 300), str(out))
    real = grid.train_claimed

    def stopped_midway(job, on_progress, should_stop):
        calls = iter(range(10_000))
        return real(job, on_progress, lambda: next(calls) == 120)

    monkeypatch.setattr(grid, "train_claimed", stopped_midway)
    with pytest.raises(grid.Interrupted):
        grid.execute([job], 1, log=lambda line: None)
    return job


def test_a_job_that_resumes_from_its_checkpoint_is_expected_to_take_only_what_is_left(tmp_path, monkeypatch):
    # Stopped at env step 120 of 300: its folder recorded the diagnostics up to its last interval (75),
    # so it is expected to take (300 - 75) / 300 of the 15 ms a step of a job with no runs to go by; the
    # same job with its checkpoint gone restarts from step 0 and takes all of it.
    job = stopped_at_step_120(tmp_path, monkeypatch, (0,))
    budget = job.budget
    recorded = records.recorded_steps(records.run_dir(tmp_path, "Pendulum-v1", "reference", 0))[0]
    assert recorded == 75 and budget.diag_every == 75
    full = 300 * grid.SECONDS_PER_MEMBER_STEP
    assert grid.remaining_share(job) == pytest.approx(225 / 300)
    assert grid.job_seconds([job]) == [pytest.approx(full * 225 / 300)]
    checkpoint = checkpoint_path(job)
    checkpoint.unlink()
    checkpoint_previous(checkpoint).unlink(missing_ok=True)
    assert grid.job_seconds([job]) == [pytest.approx(full)]


def test_a_job_resuming_from_its_checkpoint_is_not_split_to_fit_the_limit(tmp_path, monkeypatch):
    # A 2-member job stopped at env step 120 of 300 would give up what it trained if it restarted as one
    # seed; without its checkpoint it starts from step 0 anyway, and its first seed trains alone.
    job = stopped_at_step_120(tmp_path, monkeypatch, (0, 1))
    resumed = grid.job_seconds([job])[0]  # 2 seeds x 300 steps x 15 ms, times 225/300 left
    assert resumed == pytest.approx(2 * 300 * grid.SECONDS_PER_MEMBER_STEP * 225 / 300)
    part, late = grid.in_time(job, time.time() + 0.75 * resumed)
    assert part is None and [line.split(": ")[0] for line in late] == [
        "Pendulum-v1 reference seed 0",
        "Pendulum-v1 reference seed 1",
    ]
    checkpoint = checkpoint_path(job)
    checkpoint.unlink()
    checkpoint_previous(checkpoint).unlink(missing_ok=True)
    whole = grid.job_seconds([job])[0]
    part, late = grid.in_time(job, time.time() + 0.75 * whole)
    assert part == dataclasses.replace(job, seeds=(0,)) and len(late) == 1
    assert late[0].startswith("Pendulum-v1 reference seed 1: not started")
    assert grid.in_time(job, time.time() + 2 * whole) == (job, [])
    assert grid.in_time(job, None) == (job, [])


def test_a_variant_with_no_runs_is_expected_to_take_as_long_as_its_kin(tmp_path):
    # A new variant of a known env takes the median of the per-variant medians of the complete runs there
    # of the same budget, implementation and precision: not a bf16 variant's, not Stable-Baselines3's.
    budget = budget_for("smoke", "Pendulum-v1", 300)
    fp32 = CATALOG["reference"].spec.to_dict()
    for variant, seed, wall, members, spec, implementation in (
        ("reference", 0, 400.0, 4, fp32, "native"),  # 100 s a seed
        ("reference", 1, 400.0, 4, fp32, "native"),
        ("alpha-loss", 0, 150.0, 1, fp32, "native"),  # slower: 150 s a seed
        ("alpha-loss", 1, 130.0, 1, fp32, "native"),
        ("bf16", 0, 2000.0, 1, CATALOG["bf16"].spec.to_dict(), "native"),  # another precision
        ("sb3-sac", 0, 900.0, 1, fp32, "sb3"),  # another implementation
    ):
        folder = records.run_dir(tmp_path, "Pendulum-v1", variant, seed)
        records.write_json(folder / "status.json", {"state": "complete", "env_steps": 300, "wall_s": wall})
        records.write_json(
            folder / "config.json",
            {"members": members, "budget": {"total_steps": 300}, "spec": spec, "implementation": implementation},
        )

    def job(variant, seeds, env="Pendulum-v1"):
        return Job(variant, "", CATALOG[variant].spec, {}, env, seeds, budget, str(tmp_path))

    assert grid.job_seconds([job("naive-tanh", (0, 1, 2, 3)), job("sac-auto", (5,))]) == [480.0, 120.0]
    # its own runs, where it has some, come first; no kin in another env
    assert grid.job_seconds([job("alpha-loss", (2,)), job("naive-tanh", (0,), env="LunarLanderContinuous-v3")]) == [
        140.0,
        pytest.approx(300 * grid.SECONDS_PER_MEMBER_STEP),
    ]


def test_a_grid_paces_its_estimates_by_its_kins_runs_finished_since_it_began(tmp_path):
    # The reference's own runs were timed a day ago on a quieter host (100 s a seed); alpha-loss's just
    # finished at 200 s a seed under the load the grid runs under now. A bf16 run (another precision)
    # does not pace an fp32 job, and a variant whose own runs are slower than the pace keeps its own.
    budget = budget_for("smoke", "Pendulum-v1", 300)
    now = time.time()
    for variant, seed, wall, spec, finished in (
        ("reference", 0, 100.0, CATALOG["reference"].spec, now - 86_400),
        ("reference", 1, 100.0, CATALOG["reference"].spec, now - 86_400),
        ("reward-scaled", 0, 300.0, CATALOG["reward-scaled"].spec, now - 86_400),
        ("alpha-loss", 0, 200.0, CATALOG["alpha-loss"].spec, now),
        ("alpha-loss", 1, 200.0, CATALOG["alpha-loss"].spec, now),
        ("bf16", 0, 1000.0, CATALOG["bf16"].spec, now),
    ):
        folder = records.run_dir(tmp_path, "Pendulum-v1", variant, seed)
        records.write_json(folder / "status.json", {"state": "complete", "env_steps": 300, "wall_s": wall})
        records.write_json(
            folder / "config.json",
            {"members": 1, "budget": {"total_steps": 300}, "spec": spec.to_dict(), "implementation": "native"},
        )
        os.utime(folder / "status.json", (finished, finished))

    def job(variant, seeds):
        return Job(variant, "", CATALOG[variant].spec, {}, "Pendulum-v1", seeds, budget, str(tmp_path))

    reference, reward_scaled = job("reference", (2, 3)), job("reward-scaled", (1,))
    began = now - 3600
    assert grid.job_seconds([reference, reward_scaled]) == [200.0, 300.0]
    assert grid.job_seconds([reference, reward_scaled], paced_since=began) == [400.0, 300.0]
    # Paced, the 2-seed job no longer fits 300 s: its first seed starts alone.
    assert grid.in_time(reference, time.time() + 300) == (reference, [])
    part, late = grid.in_time(reference, time.time() + 300, paced_since=began)
    assert part == dataclasses.replace(reference, seeds=(2,))
    assert [line.split(": ")[0] for line in late] == ["Pendulum-v1 reference seed 3"]


def test_a_burst_of_sigints_stops_a_worker_without_deadlocking_it():
    # The handler runs between two bytecodes of whatever it interrupts, itself included: one that took a
    # lock (threading.Event.set) hung a worker as soon as a second SIGINT landed inside the first handler,
    # every time under this burst. The child must still be looping, flag set, after the burst.
    child = (
        "import signal, time\n"
        "from harness.running import grid\n"
        "signal.signal(signal.SIGINT, grid._request_stop)\n"
        "print('ready', flush=True)\n"
        "end = time.time() + 3\n"
        "while time.time() < end:\n"
        "    grid._stop_requested.is_set()\n"
        "print('stop requested' if grid._stop_requested.is_set() else 'not requested', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(20_000):
            os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=300)  # generous: a starved CI host, not a hang
    finally:
        proc.kill()
    assert (out.strip(), proc.returncode) == ("stop requested", 0)
