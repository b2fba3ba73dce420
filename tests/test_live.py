"""The live report: rebuilt as runs finish, at most every `every` seconds, never from half-written runs."""

from pathlib import Path

from harness.live import LiveReport
from test_stats import write_run

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
    assert live.builds == 1 and "3 of 10 runs finished" in lines[-1]

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
