"""Running a grid's jobs as Ray tasks (`--backend ray`), for clusters.

Each job trains in a scratch folder on whichever node runs it and returns its run folders' files to the
driver, which writes them into the results folder: no shared filesystem is needed. Finished runs are
skipped on a rerun as with the local backend; an interrupted job restarts from its beginning (its
checkpoints live on the worker's scratch disk).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import records
from .train import Job

INSTALL_HINT = 'the Ray backend needs Ray: pip install -e ".[ray]"'


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _train_remote(job: Job) -> tuple[list[dict], dict[str, bytes]]:
    """Runs on a Ray worker: train into a scratch folder, return the rows and the run files."""
    from .grid import _tune_worker
    from .implementations import run_job

    _tune_worker()
    with tempfile.TemporaryDirectory(prefix="sacbench-") as scratch:
        rows = run_job(dataclasses.replace(job, out=scratch))
        files = {
            str(path.relative_to(scratch)): path.read_bytes()
            for path in Path(scratch, "runs").rglob("*")
            if path.is_file() and not path.name.startswith(".")
        }
    return rows, files


def execute_ray(jobs: Sequence[Job], address: str | None, progress) -> list[dict]:
    """Run `jobs` as Ray tasks (one CPU each, or one GPU for CUDA jobs); returns runs.csv rows."""
    import ray

    ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        pending = {}
        for job in jobs:
            resources = {"num_gpus": 1, "num_cpus": 1} if job.device.startswith("cuda") else {"num_cpus": 1}
            pending[ray.remote(**resources)(_train_remote).remote(job)] = job
        rows: list[dict] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                job_rows, files = ray.get(ref)
                # Write the configs first and the statuses last, so a half-copied run is never "finished".
                for rel in sorted(files, key=lambda p: p.endswith("status.json")):
                    records.atomic_write_bytes(Path(job.out) / rel, files[rel])
                rows.extend(job_rows)
                progress.steps(job.budget.total_steps, len(job.seeds))
                progress.finished(job_rows)
        return rows
    finally:
        ray.shutdown()
