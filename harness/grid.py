"""Planning a grid (variants x envs x seeds) into jobs, skipping finished runs, and running the jobs."""

from __future__ import annotations

import ctypes
import multiprocessing
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from variants.catalog import CatalogEntry

from . import records
from .profiles import Budget
from .train import Job, identity, train_job

# Measured on the 2-core development machine (one thread, 256x256, batch 256): one SAC update with its
# env step costs about 15 ms per member; used only for the estimate printed before a grid starts.
SECONDS_PER_MEMBER_STEP = 0.015


class ConfigConflict(Exception):
    """A run folder holds a run of the same name but a different configuration."""


@dataclass(frozen=True)
class GridRequest:
    variants: dict[str, CatalogEntry]  # name -> entry with --set overrides applied
    overrides: dict
    envs: Sequence[str]
    seeds: Sequence[int]
    budgets: dict[str, Budget]  # env id -> budget
    out: Path
    device: str
    members: int  # seeds per job
    command: tuple[str, ...]


def run_state(path: Path) -> str | None:
    """The recorded state of a finished run folder, or None if it is unfinished or unreadable."""
    try:
        state = records.read_json(path / "status.json").get("state")
    except (OSError, ValueError, AttributeError):
        return None
    return state if state in records.STATES else None


def plan(request: GridRequest, fresh: bool = False) -> tuple[list[Job], int]:
    """Jobs for the runs still to do, and the number of runs skipped as already finished.

    Raises ConfigConflict when a run folder holds a different configuration (unless `fresh`).
    """
    jobs: list[Job] = []
    skipped = 0
    for env_id in request.envs:
        for name, entry in request.variants.items():
            todo: list[int] = []
            for seed in request.seeds:
                probe = Job(name, entry.description, entry.spec, request.overrides, env_id, (seed,),
                            request.budgets[env_id], str(request.out), request.device, request.command)
                path = records.run_dir(request.out, env_id, name, seed)
                if fresh:
                    shutil.rmtree(path, ignore_errors=True)
                if (path / "config.json").exists():
                    try:
                        old = identity(records.read_json(path / "config.json"))
                    except (OSError, ValueError):
                        old = None
                    if old is not None and old != identity(probe.run_config(seed)):
                        raise ConfigConflict(
                            f"{path} holds a run with a different configuration; use another --out, "
                            f"or --fresh to discard it"
                        )
                    if old is not None and run_state(path) is not None:
                        skipped += 1
                        continue
                todo.append(seed)
            if fresh:
                shutil.rmtree(Path(request.out) / "checkpoints" / env_id / name, ignore_errors=True)
            for i in range(0, len(todo), request.members):
                chunk = tuple(todo[i : i + request.members])
                jobs.append(Job(name, entry.description, entry.spec, request.overrides, env_id, chunk,
                                request.budgets[env_id], str(request.out), request.device, request.command))
    return jobs, skipped


def estimate_seconds(jobs: Sequence[Job], workers: int) -> float:
    member_steps = sum(job.budget.total_steps * len(job.seeds) for job in jobs)
    return member_steps * SECONDS_PER_MEMBER_STEP / max(1, min(workers, len(jobs) or 1))


def _tune_worker() -> None:
    """One torch thread per worker process, and glibc malloc kept from returning memory to the OS
    between updates (page faults per update drop from ~130 to ~1 on the development machine)."""
    import torch

    torch.set_num_threads(1)
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
        libc.mallopt(m_mmap_threshold, 1 << 30)
        libc.mallopt(m_trim_threshold, 1 << 30)
        libc.mallopt(m_top_pad, 256 << 20)
    except (OSError, AttributeError):
        pass  # not glibc: defaults are fine


def _run_job(job: Job) -> list[dict]:
    _tune_worker()
    return train_job(job)


def execute(jobs: Sequence[Job], workers: int, log=print) -> list[dict]:
    """Run `jobs` on `workers` processes (in this process when workers == 1); returns runs.csv rows."""
    rows: list[dict] = []
    total = len(jobs)
    started = time.perf_counter()

    def finished(job_rows: list[dict]) -> None:
        rows.extend(job_rows)
        done = len({(r["env"], r["variant"], r["seed"]) for r in rows})
        elapsed = time.perf_counter() - started
        for r in job_rows:
            final = "n/a" if r["final_return"] is None else f"{r['final_return']:.1f}"
            log(f"[{done} runs done, {elapsed:.0f}s] {r['env']} {r['variant']} seed {r['seed']}: "
                f"{r['state']}, final_return {final}, {r['env_steps'] / max(r['wall_s'], 1e-9):.0f} steps/s")

    if workers <= 1 or total <= 1:
        for job in jobs:
            finished(_run_job(job))
        return rows
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pending = {pool.submit(_run_job, job) for job in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                finished(fut.result())
    return rows


def collect_runs(out: Path) -> list[dict]:
    """runs.csv rows rebuilt from every finished run folder under `out`."""
    rows = []
    for path in sorted(Path(out).glob("runs/*/*/seed_*")):
        state = run_state(path)
        if state is None:
            continue
        status = records.read_json(path / "status.json")
        env_id, variant, seed = path.parts[-3], path.parts[-2], int(path.name.removeprefix("seed_"))
        rows.append({"env": env_id, "variant": variant, "seed": seed, "state": state,
                     "final_return": status.get("final_return"), "auc_return": status.get("auc_return"),
                     "env_steps": status.get("env_steps"), "wall_s": status.get("wall_s")})
    return rows


def write_runs_csv(out: Path, rows: Iterable[dict]) -> None:
    records.write_csv(Path(out) / "runs.csv", records.RUNS_COLUMNS,
                      ([r[c] for c in records.RUNS_COLUMNS] for r in rows))


def check_writable(out: Path) -> str | None:
    """None if `out` can hold results, else a one-line reason."""
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        records.atomic_write_bytes(Path(out) / ".write-test", b"ok")
        (Path(out) / ".write-test").unlink()
    except OSError as exc:
        return f"cannot write to results folder {out}: {exc.strerror or exc}"
    return None
