"""A planned grid from its jobs to its records: what `harness run` does once its request is planned.

`plan_summary` is the line the grid starts with, `train` runs the jobs on local worker processes or Ray
tasks, and `record` rebuilds runs.csv and prints the table of run states. The command line decides
what to train (`harness.cli.run`); `grid` plans and runs jobs; this module joins the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from .. import records
from . import grid
from .train import Job


def grid_size(request: grid.GridRequest) -> str:
    """'grid: V variants x E envs x S seeds = N runs'."""
    runs = len(request.variants) * len(request.envs) * len(request.seeds)
    return (
        f"grid: {len(request.variants)} variants x {len(request.envs)} envs x {len(request.seeds)} seeds = {runs} runs"
    )


def plan_summary(request: grid.GridRequest, planned: grid.Plan, workers: int) -> str:
    """One line: the grid's size, what is left to train and how, and the estimated wall time."""
    eta = grid.estimate_seconds(planned.jobs, workers)
    return (
        f"{grid_size(request)} ({planned.finished} already finished, "
        + (f"{planned.elsewhere} being trained by another process, " if planned.elsewhere else "")
        + (f"{len(planned.inconsistent)} with records that disagree, " if planned.inconsistent else "")
        + f"{len(planned.jobs)} jobs of up to {request.members} seeds, {workers} workers, {request.device}); "
        f"estimated {eta / 60:.1f} min"
    )


def train(
    jobs: Sequence[Job],
    out: Path,
    workers: int,
    backend: str = "local",
    address: str | None = None,
    on_finished: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
) -> None:
    """Train `jobs` into results folder `out`: as Ray tasks (`backend` "ray", cluster `address`), or on
    `workers` local processes, `on_finished(runs done, runs planned)` told after each job (local only: a
    Ray cluster's runs come back as it schedules them), starting no job that would end past `deadline`
    (time.time()). Raises `Interrupted` on Ctrl-C, as `grid.execute`."""
    if backend == "ray":
        from . import ray_backend

        progress = grid.Progress(jobs)
        try:
            ray_backend.execute_ray(jobs, address, progress)
        finally:
            progress.close()
        return
    # Published while this grid runs, so that the live report of another grid on the same folder
    # counts these runs among those still to come (and ours counts theirs).
    queue = records.hold_queue(out, [(job.env_id, job.variant, seed) for job in jobs for seed in job.seeds])
    try:
        grid.execute(jobs, workers, on_finished=on_finished, deadline=deadline)
    finally:
        queue.release()


def record(out: Path, variants: Sequence[str], envs: Sequence[str]) -> dict[str, int]:
    """Rebuild `out`/runs.csv from every finished run folder and print the state table of the runs of
    `variants` on `envs`; returns their counts per state."""
    rows = records.collect_runs(out)
    grid.write_runs_csv(out, rows)
    return records.print_state_table([r for r in rows if r["variant"] in variants and r["env"] in envs])
