"""The live report: rebuilt as runs finish, at most every `every` seconds, never from half-written runs."""

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from test_stats import write_run

from harness import records
from harness.live import LiveReport

ROOT = Path(__file__).resolve().parents[1]

ENV = "Pendulum-v1"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_live_report_is_rebuilt_when_due_and_skips_unfinished_runs(tmp_path: Path) -> None:
    results, out = tmp_path / "res", tmp_path / "rep"
    for seed in range(3):
        write_run(results, ENV, "reference", seed, -200.0 - seed)
    unfinished = write_run(results, ENV, "naive-tanh", 0, -300.0)
    (unfinished / "status.json").unlink()  # still training: its curves are there, its status is not
    (unfinished / "eval.csv").write_text("env_step,return_mean,return_std,episodes\n100,-12")  # half-written
    clock, lines = Clock(), []
    live = LiveReport(results, out, every=300.0, clock=clock, log=lines.append)

    live(3, 10)  # the first finished job always gets a page
    page = (out / "index.html").read_text()
    assert "7 planned run(s) are still to come" in page
    assert "3 runs read" in page and "naive-tanh" not in (out / "runs.csv").read_text()
    assert live.builds == 1 and "3 of 10 runs of this grid finished, 7 still to come" in lines[-1]

    write_run(results, ENV, "reference", 3, -190.0)
    clock.now = 100.0
    live(4, 10)  # too soon: not rebuilt
    assert live.builds == 1 and "7 planned" in (out / "index.html").read_text()
    clock.now = 400.0
    live(4, 10)
    assert live.builds == 2 and "6 planned run(s) are still to come" in (out / "index.html").read_text()
    live(10, 10)  # the last job: the grid's own final report follows, not a live one
    assert live.builds == 2


def test_a_failing_live_report_does_not_stop_the_grid(tmp_path: Path, monkeypatch) -> None:
    from harness.judging import report

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(report, "build_report", broken)
    lines = []
    live = LiveReport(tmp_path / "res", tmp_path / "rep", clock=Clock(), log=lines.append)
    live(1, 5)  # a warning line, no exception
    assert live.builds == 0 and lines and lines[0].startswith("warning: live report not rebuilt")


HOLD_QUEUE = """
import sys
from harness import records
claim = records.hold_queue(sys.argv[1], [("Pendulum-v1", "naive-tanh", 0), ("Pendulum-v1", "reference", 5)])
print("held", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def other_grid(results: Path) -> Iterator[subprocess.Popen]:
    """Another process publishing a grid's queue on `results` until it is killed."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_QUEUE, str(results)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as proc:
        try:
            assert proc.stdout.readline().strip() == "held"
            yield proc
        finally:
            proc.kill()


def test_queues_of_live_grids_are_seen_and_a_killed_grids_queue_is_ignored(tmp_path: Path) -> None:
    results = tmp_path / "res"
    mine = records.hold_queue(results, [("Pendulum-v1", "reference", 0), ("Pendulum-v1", "reference", 1)])
    with other_grid(results) as other:
        queues = sorted(records.live_queues(results))
        assert queues == [
            [("Pendulum-v1", "naive-tanh", 0), ("Pendulum-v1", "reference", 5)],
            [("Pendulum-v1", "reference", 0), ("Pendulum-v1", "reference", 1)],
        ]
        write_run(results, ENV, "reference", 0, -150.0)  # finished: no longer to come
        assert records.still_to_come(results) == 3
        other.kill()  # the OS drops its lock; its file stays behind and is ignored
        other.wait()
        assert len(list(records.grid_queue_dir(results).glob("*.json"))) == 2
        assert records.live_queues(results) == [[("Pendulum-v1", "reference", 0), ("Pendulum-v1", "reference", 1)]]
        assert records.still_to_come(results) == 1
    mine.release()
    assert not mine.path.exists() and records.live_queues(results) == []


def test_the_same_run_queued_by_two_grids_counts_once(tmp_path: Path) -> None:
    results = tmp_path / "res"
    first = records.hold_queue(results, [("Pendulum-v1", "naive-tanh", 0)])
    with other_grid(results):  # the same command started twice plans the same runs
        assert records.still_to_come(results) == 2  # naive-tanh 0 (both) and reference 5
    first.release()


def test_a_live_report_counts_the_runs_another_grid_on_the_folder_still_has(tmp_path: Path) -> None:
    results, out = tmp_path / "res", tmp_path / "rep"
    write_run(results, ENV, "reference", 0, -200.0)
    with other_grid(results):
        lines = []
        live = LiveReport(
            results, out, clock=Clock(), log=lines.append, still_to_come=lambda: records.still_to_come(results)
        )
        live(1, 1 + 0 + 1)  # this grid: 1 of 2 done; the other grid: 2 queued, none finished
        assert "2 planned run(s) are still to come" in (out / "index.html").read_text()
        assert "1 of 2 runs of this grid finished, 2 still to come on the folder" in lines[-1]


def test_a_grid_that_ends_first_reports_the_runs_another_grid_still_has(tmp_path: Path) -> None:
    results = tmp_path / "grid"
    with other_grid(results):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                "--variants",
                "reference",
                "--envs",
                ENV,
                "--seeds",
                "1",
                "--steps",
                "300",
                "--profile",
                "smoke",
                "--set",
                "learning_starts=100",
                "--set",
                "hidden_sizes=32,32",
                "--out",
                str(results),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        page = (tmp_path / "reports" / "grid" / "index.html").read_text()
        assert "2 planned run(s) are still to come" in page  # the other grid's naive-tanh 0 and reference 5
        assert len(records.live_queues(results)) == 1  # this grid's queue went with it
    assert len(list(records.grid_queue_dir(results).glob("*.json"))) == 1  # the killed one's, ignored
    assert records.live_queues(results) == []
