"""Planning a grid (variants x envs x seeds) into jobs, skipping finished runs, and running the jobs."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import heapq
import multiprocessing
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from variants.catalog import CatalogEntry

from .. import machine, records
from ..records import (  # noqa: F401  (read by the CLI and sequential grids)
    budget_steps,
    claim_holder,
    claim_run,
    collect_runs,
    folder_states,
    recorded_members,
    run_state,
)
from .envs import EnvRef
from .errors import WorkerCrashed
from .implementations import TRAINERS, run_job
from .profiles import Budget
from .train import Interrupted, Job, checkpoint_path, checkpoint_previous, identity

# One SAC update with its env step, per member, on one CPU thread (figure: docs/measurements.md, grid.py);
# used only for the estimate printed before a grid starts and when no finished run gives a better one.
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
    env_refs: Mapping[str, EnvRef] = field(default_factory=dict)  # env label -> how to make it (default: the id)
    normalization: Mapping[str, dict] = field(default_factory=dict)  # env label -> --target/--random given
    tensorboard: bool = False

    def job_options(self, env_id: str) -> dict:
        """The Job fields that depend on the env and on options that change no result."""
        return {
            "env_ref": self.env_refs.get(env_id),
            "normalization": self.normalization.get(env_id),
            "tensorboard": self.tensorboard,
        }


class Plan(NamedTuple):
    jobs: list[Job]  # the runs still to do, in the order to run them
    finished: int  # runs skipped as already finished
    elsewhere: int  # runs skipped as being trained by another process (another grid on the same folder)
    inconsistent: list[str] = []  # one line per run skipped because its records disagree (see --repair)


def _pid_text(holder: str) -> str:
    return f" (pid {holder})" if holder else ""


@dataclass
class PlanTally:
    """What planning skipped so far (`iter_plan` adds to it as it goes)."""

    finished: int = 0
    elsewhere: int = 0
    inconsistent: list[str] = field(default_factory=list)


def plan(request: GridRequest, fresh: bool = False, repair: bool = False) -> Plan:
    """Jobs for the runs still to do, and how many runs were skipped as finished or as claimed by
    another process (a second grid on the same results folder: it keeps them), and the runs skipped
    because their records disagree (`records.check_run`; with `repair` they are set aside and retrained).

    Raises ConfigConflict when the folder holds runs of the same names but a different configuration
    (unless `fresh`), or when `fresh` would discard a run that another process is training.
    """
    if fresh:
        discard(request)
    tally = PlanTally()
    jobs = list(iter_plan(request, tally, repair))
    return Plan(jobs, tally.finished, tally.elsewhere, tally.inconsistent)


def discard(request: GridRequest) -> None:
    """`--fresh`: delete the run folders and checkpoints of the grid's runs, after making sure that no
    other process is training one of them (it would go on writing into nothing)."""
    for env_id in request.envs:
        for name in request.variants:
            for seed in request.seeds:
                holder = claim_holder(request.out, env_id, name, seed)
                if holder is not None:
                    raise ConfigConflict(
                        f"--fresh: {env_id} {name} seed {seed} is being trained by another "
                        f"process{_pid_text(holder)}; stop it first, or use another --out"
                    )
    for env_id in request.envs:
        for name in request.variants:
            for seed in request.seeds:
                shutil.rmtree(records.run_dir(request.out, env_id, name, seed), ignore_errors=True)
            shutil.rmtree(Path(request.out) / "checkpoints" / env_id / name, ignore_errors=True)
            (Path(request.out) / "runs" / env_id / name / GRID_IDENTITY).unlink(missing_ok=True)


def iter_plan(request: GridRequest, tally: PlanTally, repair: bool = False) -> Iterator[Job]:
    """The jobs of `plan`, lazily and in the order a grid runs them: the cheapest environment first, and
    seed-major within it (every variant gets seed k before any gets seed k+1), so a partial grid (stopped,
    or still running) holds comparable, paired evidence. A huge grid's first jobs come at once."""
    streams = [
        _variant_jobs(request, env_id, name, entry, tally, repair)
        for env_id in request.envs
        for name, entry in request.variants.items()
    ]
    # heapq.merge is stable: equal keys keep the env-major, variant order of `streams`
    return heapq.merge(*streams, key=lambda job: (job.budget.total_steps, job.seeds[0]))


def _variant_jobs(
    request: GridRequest, env_id: str, name: str, entry: CatalogEntry, tally: PlanTally, repair: bool
) -> Iterator[Job]:
    """The jobs of one (env, variant) in seed order: its unfinished seeds in chunks of up to `members`."""
    job = Job(
        name,
        entry.description,
        entry.spec,
        request.overrides,
        env_id,
        (request.seeds[0],) if len(request.seeds) else (0,),
        request.budgets[env_id],
        str(request.out),
        request.device,
        request.command,
        entry.implementation,
        **request.job_options(env_id),
    )
    _check_grid_identity(request.out, job)
    per_job = request.members if TRAINERS[entry.implementation].batches_members else 1
    chunk: list[int] = []
    for seed in request.seeds:
        if _seed_to_train(request.out, job, seed, tally, repair):
            chunk.append(seed)
        if len(chunk) == per_job:
            yield dataclasses.replace(job, seeds=tuple(chunk))
            chunk = []
    if chunk:
        yield dataclasses.replace(job, seeds=tuple(chunk))


def _seed_to_train(out: Path, job: Job, seed: int, tally: PlanTally, repair: bool) -> bool:
    """Whether one run of `job` is still to train; counts it in `tally` where it is not."""
    path = records.run_dir(out, job.env_id, job.variant, seed)
    if (path / "config.json").exists():
        try:
            old = identity(records.read_json(path / "config.json"))
        except (OSError, ValueError):
            old = None
        if old is not None and old != identity(job.identity_config(seed)):
            raise ConfigConflict(
                f"{path} holds a run with a different configuration ({_difference(old, job, seed)}); "
                "use another --out, or --fresh to discard it"
            )
    check = records.check_run(path)
    if check.state is not None:
        tally.finished += 1
        return False
    if claim_holder(out, job.env_id, job.variant, seed) is not None:
        tally.elsewhere += 1
        return False
    if check.problem is not None:
        if repair:
            records.set_aside(out, job.env_id, job.variant, seed)
            return True
        tally.inconsistent.append(f"{job.env_id} {job.variant} seed {seed}: {check.problem}")
        return False
    return True


# Each (env, variant) folder of a results folder records the configuration its runs share (identity
# without the seed) when its first grid plans it: a later grid of another budget, spec or environment
# arguments is refused before it trains a run, whether the first is still running or finished.
GRID_IDENTITY = "grid_identity.json"


def _check_grid_identity(out: Path, job: Job) -> None:
    """Raise ConfigConflict when the (env, variant) of `job` in `out` was planned with another
    configuration (its GRID_IDENTITY, else the config.json of any of its runs); record it otherwise."""
    mine = {k: v for k, v in identity(job.identity_config(0)).items() if k != "seed"}
    folder = Path(out) / "runs" / job.env_id / job.variant
    recorded = None
    candidates = [folder / GRID_IDENTITY, *sorted(folder.glob("seed_*/config.json"))] if folder.is_dir() else []
    for path in candidates:
        try:
            data = records.read_json(path)
        except (OSError, ValueError):
            continue
        recorded = data if path.name == GRID_IDENTITY else identity(data)
        recorded = {k: v for k, v in recorded.items() if k != "seed"}
        break
    if recorded is not None and recorded != mine:
        raise ConfigConflict(
            f"{folder} holds runs of a different configuration ({_difference(recorded, job, 0)}); "
            "use another --out, or --fresh to discard them"
        )


def record_grid_identity(jobs: Sequence[Job]) -> None:
    """Write GRID_IDENTITY for each (env, variant) of `jobs` that has none, as a grid starts. The file is
    created only where none exists (two grids starting together: the second is compared with the first's
    and refused with ConfigConflict where they differ)."""
    for job in {(j.out, j.env_id, j.variant): j for j in jobs}.values():
        path = Path(job.out) / "runs" / job.env_id / job.variant / GRID_IDENTITY
        mine = {k: v for k, v in identity(job.identity_config(0)).items() if k != "seed"}
        if not records.create_json(path, mine):
            _check_grid_identity(Path(job.out), job)


def _difference(recorded: dict, job: Job, seed: int) -> str:
    """The fields where a recorded identity differs from `job`'s, as 'budget: ... here, ... recorded'."""
    mine = identity(job.identity_config(seed))
    parts = []
    for key in sorted(set(recorded) | set(mine)):
        if key == "seed" or recorded.get(key) == mine.get(key):
            continue
        a, b = recorded.get(key), mine.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            inner = [
                f"{k} {b.get(k)!r} here, {a.get(k)!r} recorded" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
            ]
            parts.append(f"{key}: {', '.join(inner)}")
        else:
            parts.append(f"{key}: {b!r} here, {a!r} recorded")
    return "; ".join(parts) or "recorded differently"


def job_line(job: Job) -> str:
    """One planned job: env, variant, seeds, env steps."""
    seeds = ", ".join(map(str, job.seeds))
    return (
        f"  {job.env_id}  {job.variant}  seed{'s' if len(job.seeds) > 1 else ''} {seeds}  "
        f"({job.budget.total_steps:,} steps)"
    )


def plan_text(jobs: Sequence[Job]) -> str:
    """The jobs one per line, in the order a grid runs them: env, variant, seeds, env steps."""
    return "\n".join(["would train, in this order:", *map(job_line, jobs)])


ESTIMATED_JOBS = 10_000  # a dry run estimates the time of a grid of at most this many jobs


def dry_run(request: GridRequest, head: str, workers: int, log=print) -> None:
    """Print `head`, then each job still to train as planning finds it (the first lines of a huge grid
    come at once), then what was skipped and, for a grid of up to ESTIMATED_JOBS jobs, its time."""
    log(f"{head}; would train, in this order:", flush=True)
    tally, count, kept = PlanTally(), 0, []
    for job in iter_plan(request, tally):
        log(job_line(job), flush=count < 100)
        count += 1
        if count <= ESTIMATED_JOBS:
            kept.append(job)
    if count == 0:
        log("nothing to train: every run is finished or being trained elsewhere")
    for line in tally.inconsistent:
        log(f"inconsistent: {line}; not retrained (rerun with --repair)")
    estimate = f"; estimated {estimate_seconds(kept, workers) / 60:.1f} min" if count <= ESTIMATED_JOBS else ""
    log(
        f"dry run: {count} jobs ({tally.finished} already finished, "
        + (f"{tally.elsewhere} being trained by another process, " if tally.elsewhere else "")
        + (f"{len(tally.inconsistent)} with records that disagree, " if tally.inconsistent else "")
        + f"up to {request.members} seeds a job, {workers} workers, {request.device}){estimate}"
    )


@contextlib.contextmanager
def claimed(job: Job) -> Iterator[tuple[Job | None, list[str]]]:
    """The part of `job` this process trains: the seeds whose run it could claim (`records.try_lock_run`,
    held until the block ends) and that are still unfinished. Another grid on the same results folder
    may have started or finished a run since this one was planned; that run is left to it.

    Yields (the job with those seeds, or None when none is left; one line per seed left out).
    """
    locks: list[records.RunLock] = []
    kept: list[int] = []
    left_out: list[str] = []
    try:
        for seed in job.seeds:
            name = f"{job.env_id} {job.variant} seed {seed}"
            lock = claim_run(job.out, job.env_id, job.variant, seed)
            if lock is None:
                holder = records.run_lock_holder(job.out, job.env_id, job.variant, seed)
                left_out.append(f"{name}: left to another process that is training it{_pid_text(holder)}")
                continue
            check = records.check_run(records.run_dir(job.out, job.env_id, job.variant, seed))
            if check.state is not None or check.problem is not None:
                lock.release()
                left_out.append(
                    f"{name}: finished by another process since this grid was planned; kept as it is"
                    if check.state is not None
                    else f"{name}: its records disagree ({check.problem}); not retrained (rerun with --repair)"
                )
                continue
            locks.append(lock)
            kept.append(seed)
        yield (dataclasses.replace(job, seeds=tuple(kept)) if kept else None), left_out
    finally:
        for lock in locks:
            lock.release()


class JobOutcome(NamedTuple):
    job: Job  # as planned
    rows: list[dict]  # runs.csv rows of the runs it trained
    left_out: list[str]  # one line per seed left to another process


def train_claimed(job: Job, on_progress: Callable[[int, int], None], should_stop: Callable[[], bool]) -> JobOutcome:
    """Train the part of `job` this process can claim (`claimed`); `on_progress(n, members)` is told
    every n new env steps of each of `members` runs."""
    with claimed(job) as (mine, left_out):
        if mine is None:
            return JobOutcome(job, [], left_out)
        members = len(mine.seeds)
        rows = run_job(mine, on_progress=lambda n: on_progress(n, members), should_stop=should_stop)
    return JobOutcome(job, rows, left_out)


def emulated_bf16_warning(jobs: Sequence[Job], device: str) -> str | None:
    """One warning line when bf16 jobs are to train on a CPU that multiplies bfloat16 only by emulation
    (`machine.native_bf16`), else None: such runs are as valid, but many times slower."""
    bf16 = [job for job in jobs if job.spec.precision == "bf16"]
    if device != "cpu" or not bf16 or machine.native_bf16() is not False:
        return None
    return (
        f"warning: {len(bf16)} job(s) train in bf16, but this CPU ({machine.cpu_info()[0]}) has neither AVX512_BF16 "
        "nor AMX: its bfloat16 products are emulated (an update took 21x the fp32 update on an AVX2 host; "
        "python -m harness bench times this one), and those runs will take that much longer than the estimate"
    )


def job_seconds(jobs: Sequence[Job], paced_since: float | None = None) -> list[float]:
    """Each job's expected wall time, per seed: the median wall time of the complete runs of its variant
    and env already in its results folder (same budget); where there are none, that of its failed runs
    of the same budget (an exception at a given step, as critic-first's at its first update, recurs on
    every seed); where there are none either, the median over the other variants of that env and budget
    trained by the same implementation in the same precision of each one's median (a new variant of a
    known environment costs about what its kin cost there, better known than a per-step guess; a median,
    not the slowest, as a variant's own runs give, so one run slowed by a paused or shared CPU does not
    hold the grid's other jobs back); else SECONDS_PER_MEMBER_STEP a step. A run trained as one of m
    members records its whole job's wall time, so it counts as that time / m a seed. A job that resumes
    from a checkpoint is expected to take only its `remaining_share`.

    `paced_since` (time.time(), a grid's start): a job is expected to take at least the median time a
    seed of the runs of its kin (its own variant's included) that finished since, timed under the load
    the grid trains under now, where a variant's own runs may have been timed on a quieter host (a job
    started on too short an estimate can run past --stop-after and be lost with the machine; one held
    back by too long an estimate only splits or leaves its worker idle)."""
    finished = {folder: collect_runs(Path(folder), verified=False) for folder in {job.out for job in jobs}}
    out: list[float] = []
    for job in jobs:
        same_env = [
            (row, records.run_dir(Path(job.out), job.env_id, row["variant"], row["seed"]))
            for row in finished[job.out]
            if row["env"] == job.env_id and row["wall_s"]
        ]
        mine = [(row, path) for row, path in same_env if row["variant"] == job.variant]
        walls = [
            row["wall_s"] / recorded_members(path)
            for row, path in mine
            if row["state"] == "complete" and row["env_steps"] == job.budget.total_steps
        ]
        if not walls:
            walls = [
                row["wall_s"] / recorded_members(path)
                for row, path in mine
                if row["state"] == "failed" and budget_steps(path) == job.budget.total_steps
            ]
        if not walls:
            walls = _kin_seconds([(row, path) for row, path in same_env if row["variant"] != job.variant], job)
        per_seed = float(np.median(walls)) if walls else job.budget.total_steps * SECONDS_PER_MEMBER_STEP
        if paced_since is not None:
            paced = [
                row["wall_s"] / recorded_members(path)
                for row, path in same_env
                if row["state"] == "complete"
                and row["env_steps"] == job.budget.total_steps
                and finished_since(path, paced_since)
                and is_kin(path, job)
            ]
            if paced:
                per_seed = max(per_seed, float(np.median(paced)))
        out.append(per_seed * len(job.seeds) * remaining_share(job))
    return out


def remaining_share(job: Job) -> float:
    """The share of `job`'s budget it has still to train: 1 without a checkpoint (it starts from env step
    0), else 1 - the fewest env steps its seeds' run folders recorded / the budget. A job resumes at its
    checkpoint, at or past what its folders recorded, so the share is never too small."""
    checkpoint = checkpoint_path(job)
    if not (checkpoint.exists() or checkpoint_previous(checkpoint).exists()):
        return 1.0
    done = [records.recorded_steps(records.run_dir(Path(job.out), job.env_id, job.variant, s))[0] for s in job.seeds]
    return max(0.0, 1.0 - min(d or 0 for d in done) / job.budget.total_steps)


def is_kin(path: Path, job: Job) -> bool:
    """Whether the run in `path` was trained by `job`'s implementation in `job`'s precision (so it costs
    about what `job` costs a step); False when its config cannot be read."""
    try:
        config = records.read_json(path / "config.json")
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    return (
        config.get("implementation", "native") == job.implementation
        and records.recorded_spec(config).get("precision") == job.spec.precision
    )


def finished_since(path: Path, since: float) -> bool:
    """Whether the run in `path` recorded its end (status.json, written once, atomically) at or after
    `since` (time.time()). For times within one session only: a clone stamps every file with its own
    time."""
    try:
        return (path / "status.json").stat().st_mtime >= since
    except OSError:
        return False


def _kin_seconds(others: Sequence[tuple[dict, Path]], job: Job) -> list[float]:
    """Each variant's median wall time a seed, from the complete runs among `others` (rows and
    folders of other variants in `job`'s env) of `job`'s budget, implementation and precision; [] when
    there are none."""
    by_variant: dict[str, list[float]] = {}
    for row, path in others:
        if row["state"] == "complete" and row["env_steps"] == job.budget.total_steps and is_kin(path, job):
            by_variant.setdefault(row["variant"], []).append(row["wall_s"] / recorded_members(path))
    return [float(np.median(walls)) for walls in by_variant.values()]


def estimate_seconds(jobs: Sequence[Job], workers: int) -> float:
    return sum(job_seconds(jobs)) / max(1, min(workers, len(jobs) or 1))


# --- a time limit: start no job that would not finish in time (a cluster's walltime, a session) -----

_deadline: float | None = None  # time.time() by which every started job should have finished
_paced_since: float | None = None  # time.time() when the grid began (job_seconds' paced_since)


def too_late(job: Job, seconds: float, deadline: float | None) -> list[str]:
    """Nothing when `job` (expected to take `seconds`) can start now and end by `deadline` (time.time());
    else one line per seed saying it was not started."""
    if deadline is None or time.time() + seconds <= deadline:
        return []
    return [
        f"{job.env_id} {job.variant} seed {seed}: not started: its expected {seconds / 60:.0f} min would end "
        "past --stop-after (a rerun of the same command trains it)"
        for seed in job.seeds
    ]


def in_time(job: Job, deadline: float | None, paced_since: float | None = None) -> tuple[Job | None, list[str]]:
    """The part of `job` to start now, and a `too_late` line for each seed left out, its expected time
    estimated now rather than when the grid was planned (the runs finished since, this grid's own or
    another grid's on the same folder, count). All of it when it is expected to end by `deadline`;
    else, where it would start from env step 0, its first seeds as a smaller job, as many as are
    expected to end in time, each at the whole job's time a seed (a 4-member job at the end of a session
    becomes 2 members or a seed alone rather than leave the worker idle; the seeds left go to a rerun's
    jobs); a job resuming from its checkpoint is not split, which would give up what it trained.
    `paced_since`: as `job_seconds`'."""
    if deadline is None:
        return job, []
    seconds = job_seconds([job], paced_since)[0]
    late = too_late(job, seconds, deadline)
    if not late:
        return job, []
    if remaining_share(job) == 1.0:
        for k in range(len(job.seeds) - 1, 0, -1):
            part = dataclasses.replace(job, seeds=job.seeds[:k])
            if not too_late(part, seconds * k / len(job.seeds), deadline):
                return part, late[k:]
    return None, late


def _tune_worker() -> None:
    """One torch thread per worker process, and glibc malloc kept from returning memory to the OS
    between updates, where returning and refaulting it costs page faults on every update
    (docs/measurements.md, grid.py)."""
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


# --- stopping on Ctrl-C: each process sets a flag that its training loop checks between steps ----


class StopFlag:
    """Set by the SIGINT handler, read by the training loop (`is_set`). A plain attribute, no lock: a
    handler runs between two bytecodes of the code it interrupts, itself included, so one that takes a
    lock (threading.Event.set does) deadlocks when a second SIGINT lands while the first handler holds it,
    as Ctrl-C on the terminal plus the grid's own stop can deliver."""

    def __init__(self) -> None:
        self.requested = False

    def set(self) -> None:
        self.requested = True

    def clear(self) -> None:
        self.requested = False

    def is_set(self) -> bool:
        return self.requested


_stop_requested = StopFlag()


def _request_stop(signum, frame) -> None:
    _stop_requested.set()


def _worker_init(progress_queue, deadline: float | None = None, paced_since: float | None = None) -> None:
    global _progress_queue, _deadline, _paced_since
    _progress_queue, _deadline, _paced_since = progress_queue, deadline, paced_since
    _tune_worker()
    signal.signal(signal.SIGINT, _request_stop)


_progress_queue = None


def _report_progress(steps: int) -> None:
    if _progress_queue is not None:
        _progress_queue.put(steps)


def train_in_time(
    job: Job,
    deadline: float | None,
    on_progress: Callable[[int, int], None],
    should_stop: Callable[[], bool],
    paced_since: float | None = None,
) -> JobOutcome:
    """`train_claimed` on the part of `job` expected to end by `deadline` (`in_time`); the seeds left
    out are named in the outcome's left_out."""
    part, late = in_time(job, deadline, paced_since)
    if part is None:
        return JobOutcome(job, [], late)
    outcome = train_claimed(part, on_progress, should_stop)
    return JobOutcome(job, outcome.rows, outcome.left_out + late)


def _run_job(job: Job) -> JobOutcome:
    return train_in_time(
        job, _deadline, lambda n, members: _report_progress(n * members), _stop_requested.is_set, _paced_since
    )


class Progress:
    """Grid progress: a tqdm bar on a terminal; otherwise one line per finished run and a status line
    every `every` seconds (CI logs, files)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        log=print,
        every: float = 60.0,
        stream=None,
        on_finished: Callable[[int, int], None] | None = None,
    ):
        self.stream = stream or sys.stderr
        self.on_finished = on_finished  # told (runs done, runs planned) after each finished job
        self.total_runs = sum(len(j.seeds) for j in jobs)
        self.total_steps = sum(j.budget.total_steps * len(j.seeds) for j in jobs)
        self.runs_done, self.steps_done = 0, 0
        self.started = self.last_line = time.perf_counter()
        self.log, self.every = log, every
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total_steps,
                unit="step",
                unit_scale=True,
                file=self.stream,
                desc=f"runs 0/{self.total_runs}",
                smoothing=0.05,
            )

    def steps(self, n: int, members: int = 1) -> None:
        self.steps_done += n * members
        if self.bar is not None:
            self.bar.update(n * members)
        elif time.perf_counter() - self.last_line >= self.every:
            self.last_line = time.perf_counter()
            self.log(self.status_line())

    def status_line(self) -> str:
        elapsed = time.perf_counter() - self.started
        rate = self.steps_done / elapsed if elapsed > 0 else 0.0
        eta = (self.total_steps - self.steps_done) / rate if rate > 0 else float("nan")
        return (
            f"[status] {self.runs_done}/{self.total_runs} runs done, {self.steps_done:,}/{self.total_steps:,} "
            f"env steps, {rate:.0f} steps/s, elapsed {elapsed / 60:.1f} min, ETA {eta / 60:.1f} min"
        )

    def left_out(self, outcome: JobOutcome) -> None:
        """Take the seeds of a job that another process trains out of the totals, and say so."""
        if not outcome.left_out:
            return
        n = len(outcome.left_out)
        self.total_runs -= n
        self.total_steps -= n * outcome.job.budget.total_steps
        if self.bar is not None:
            self.bar.total = self.total_steps
        for line in outcome.left_out:
            if self.bar is not None:
                self.bar.write(line, file=self.stream)
            else:
                self.log(line)

    def finished(self, rows: list[dict]) -> None:
        self.runs_done += len(rows)
        for r in rows:
            final = "n/a" if r["final_return"] is None else f"{r['final_return']:.1f}"
            line = (
                f"[{self.runs_done}/{self.total_runs}] {r['env']} {r['variant']} seed {r['seed']}: {r['state']}, "
                f"final_return {final}, {r['env_steps'] / max(r['wall_s'], 1e-9):.0f} steps/s"
            )
            if self.bar is not None:
                self.bar.set_description(f"runs {self.runs_done}/{self.total_runs}")
                self.bar.write(line, file=self.stream)
            else:
                self.log(line)
        if self.on_finished is not None:
            self.on_finished(self.runs_done, self.total_runs)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _print_flushed(*args) -> None:
    print(*args, flush=True)  # a grid's log is often a file: each line should land when it happens


def execute(
    jobs: Sequence[Job],
    workers: int,
    log=_print_flushed,
    on_finished: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
    paced_since: float | None = None,
) -> list[dict]:
    """Run `jobs` on `workers` processes (in this process when workers == 1); returns runs.csv rows.

    `on_finished(runs done, runs planned)` is called after each job's runs are recorded (a live report).
    `deadline` (time.time()): a job whose expected duration (`job_seconds`, estimated as it is about
    to start, paced by the runs finished since `paced_since`, the grid's start, by default this call's)
    would end past it is not started, or starts as its first seeds that fit (one line for each seed
    left out); started jobs run to their end.
    On Ctrl-C every running job stops (a native job after writing a checkpoint; a Stable-Baselines3
    job, which keeps none, to restart from its start) and logs where; `Interrupted` is then raised here.
    """
    rows: list[dict] = []
    progress = Progress(jobs, log=log, on_finished=on_finished)
    interrupted = False
    paced_since = time.time() if paced_since is None else paced_since
    try:
        if workers <= 1 or len(jobs) <= 1:
            interrupted = _execute_here(jobs, deadline, paced_since, progress, rows)
        else:
            interrupted = _execute_pool(jobs, deadline, paced_since, workers, progress, rows)
    finally:
        progress.close()
    if interrupted:
        raise Interrupted("stopped the running jobs")
    return rows


def _execute_here(
    jobs: Sequence[Job], deadline: float | None, paced_since: float, progress: Progress, rows: list[dict]
) -> bool:
    _tune_worker()
    _stop_requested.clear()
    previous = signal.signal(signal.SIGINT, _request_stop)
    try:
        for job in jobs:
            try:
                outcome = train_in_time(job, deadline, progress.steps, _stop_requested.is_set, paced_since)
            except Interrupted as exc:
                progress.log(f"interrupted: {exc}")
                return True
            _record(outcome, progress, rows)
    finally:
        signal.signal(signal.SIGINT, previous)
    return False


def _execute_pool(
    jobs: Sequence[Job],
    deadline: float | None,
    paced_since: float,
    workers: int,
    progress: Progress,
    rows: list[dict],
) -> bool:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    interrupted = False
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(queue, deadline, paced_since)
    ) as pool:
        # Workers start with SIGINT ignored (inherited through spawn) until their initializer installs
        # the checkpoint-and-stop handler: a Ctrl-C while they import torch must not kill them.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            pending = {pool.submit(_run_job, job) for job in jobs}
        finally:
            signal.signal(signal.SIGINT, previous)
        while pending:
            try:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                _drain(queue, progress)
                for fut in done:
                    if fut.cancelled():  # not started when Ctrl-C came
                        continue
                    try:
                        outcome = fut.result()
                    except Interrupted as exc:
                        progress.log(f"interrupted: {exc}")
                        interrupted = True
                        continue
                    except BrokenProcessPool as exc:
                        if interrupted:
                            continue
                        raise WorkerCrashed(
                            "a worker process died (out of memory or killed?); finished runs "
                            "are kept and a rerun resumes the others"
                        ) from exc
                    _record(outcome, progress, rows)
            except KeyboardInterrupt:
                # The terminal's Ctrl-C reaches the workers too; a signal sent to this process alone
                # is forwarded. Jobs not yet started are dropped; running ones checkpoint and stop.
                interrupted = True
                for fut in pending:
                    fut.cancel()
                for proc in list(getattr(pool, "_processes", {}).values()):
                    try:
                        os.kill(proc.pid, signal.SIGINT)
                    except OSError:
                        pass
    _drain(queue, progress)
    return interrupted


def _record(outcome: JobOutcome, progress: Progress, rows: list[dict]) -> None:
    progress.left_out(outcome)
    rows.extend(outcome.rows)
    if outcome.rows:
        progress.finished(outcome.rows)


def _drain(queue, progress: Progress) -> None:
    while True:
        try:
            progress.steps(queue.get_nowait())
        except Exception:  # queue.Empty, or a closed queue at shutdown
            return


def write_runs_csv(out: Path, rows: Iterable[dict]) -> None:
    records.write_csv(
        Path(out) / "runs.csv", records.RUNS_COLUMNS, ([r[c] for c in records.RUNS_COLUMNS] for r in rows)
    )


def check_writable(out: Path) -> str | None:
    """None if `out` can hold results, else a one-line reason."""
    problem = records.unwritable(out)
    return f"cannot write to results folder {out}: {problem}" if problem else None
