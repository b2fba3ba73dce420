"""Run records on disk: atomic writes, the run folder layout. See results/README.md; the machine and
software a run records as its provenance come from `harness.machine`."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

EVAL_COLUMNS = ("env_step", "return_mean", "return_std", "episodes")
TRAIN_COLUMNS = ("env_step", "episode_return", "episode_length")
RUNS_COLUMNS = ("env", "variant", "seed", "state", "final_return", "auc_return", "env_steps", "wall_s")
STATES = ("complete", "failed", "diverged")


def runs_row(env_id: str, variant: str, seed: int, status: dict) -> dict:
    """One runs.csv row (`RUNS_COLUMNS`) of a run from its status.json contents: the one place it is built."""
    return {
        "env": env_id,
        "variant": variant,
        "seed": seed,
        "state": status.get("state"),
        "final_return": status.get("final_return"),
        "auc_return": status.get("auc_return"),
        "env_steps": status.get("env_steps"),
        "wall_s": status.get("wall_s"),
    }


def run_dir(out: Path, env_id: str, variant: str, seed: int) -> Path:
    return Path(out) / "runs" / env_id / variant / f"seed_{seed}"


# --- claiming a run: two grids on one results folder never train the same run -----------------------


def run_lock_path(out: Path, env_id: str, variant: str, seed: int) -> Path:
    """The lock file of one run; beside the checkpoints, which are never committed."""
    return Path(out) / "checkpoints" / env_id / variant / f"seed_{seed}.lock"


class RunLock:
    """This process's exclusive claim on one run, until `release` (or the process's end: the OS drops the
    lock of a killed process, so no claim outlives its grid)."""

    def __init__(self, handle: BinaryIO):
        self._handle = handle

    def release(self) -> None:
        self._handle.close()


def try_lock_run(out: Path, env_id: str, variant: str, seed: int) -> RunLock | None:
    """Claim a run for this process, or None when another process holds it (it is training the run).

    An exclusive, non-blocking `flock` on the run's lock file, which records the holder's pid. Where the
    OS has no `flock` (Windows) every claim succeeds: there, two grids must not share a results folder.
    """
    path = run_lock_path(out, env_id, variant, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+b")
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n".encode())
    handle.flush()
    return RunLock(handle)


def run_lock_holder(out: Path, env_id: str, variant: str, seed: int) -> str:
    """The pid recorded in a run's lock file ('' when it cannot be read): for messages only."""
    try:
        return run_lock_path(out, env_id, variant, seed).read_text().strip()
    except OSError:
        return ""


# --- a grid's queue: what every grid on one results folder still means to train ----------------------


def grid_queue_dir(out: Path) -> Path:
    """Where each running grid lists the runs it plans; beside the run locks, never committed."""
    return Path(out) / "checkpoints" / "grids"


class QueueClaim:
    """This process's published queue, until `release` (the file is removed) or the process's end (the
    OS drops the lock, and readers then ignore the file a killed grid left behind)."""

    def __init__(self, handle: BinaryIO, path: Path):
        self._handle, self.path = handle, path

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        self._handle.close()


def hold_queue(out: Path, runs: Iterable[tuple[str, str, int]]) -> QueueClaim:
    """Publish the runs `(env, variant, seed)` this process plans to train, under an exclusive `flock`
    held until `release`: a live report of another grid on the same folder counts them as still to come."""
    folder = grid_queue_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".json", dir=folder)
    handle = os.fdopen(fd, "r+b")
    if fcntl is not None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # a new file: nobody else can hold it
    handle.write(json.dumps([list(run) for run in runs]).encode())
    handle.flush()
    return QueueClaim(handle, Path(name))


def live_queues(out: Path) -> list[list[tuple[str, str, int]]]:
    """The runs queued by each grid process alive now on `out` (this one included while it holds its
    queue). A file whose lock nobody holds is a killed grid's and is ignored; one being written, likewise,
    until the next look. Without `flock` (Windows) no queue is known to be alive: none is returned."""
    found: list[list[tuple[str, str, int]]] = []
    folder = grid_queue_dir(out)
    if fcntl is None or not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            with open(path, "rb") as handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                    continue  # nobody holds it: the grid that wrote it is gone
                except BlockingIOError:
                    pass
                runs = json.loads(handle.read().decode())
            found.append([(str(env), str(variant), int(seed)) for env, variant, seed in runs])
        except (OSError, ValueError, TypeError):
            continue
    return found


def not_a_results_folder(path: Path) -> str | None:
    """Why `path` cannot be read as a results folder ("does not exist", "is a file, not a folder"), or None."""
    path = Path(path)
    if path.is_dir():
        return None
    return "is a file, not a folder" if path.exists() else "does not exist"


def unwritable(folder: Path, keep_created: bool = True) -> str | None:
    """None when `folder` can be created and written, else why not (one line). With `keep_created`
    false, the folders the probe created are removed again (a caller that may still refuse its input
    leaves nothing behind)."""
    folder = Path(folder)
    probe = folder / f".write-test-{os.getpid()}"  # one name per process: two grids may share a folder
    created = next((p for p in [*reversed(folder.parents), folder] if not p.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(probe, b"ok")
        probe.unlink()
    except OSError as exc:
        return str(exc.strerror or exc)
    finally:
        if created is not None and not keep_created:
            shutil.rmtree(created, ignore_errors=True)
    return None


class WriteError(OSError):
    """A results file could not be written (permissions, full disk); the old file, if any, is intact."""


def _atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, fsync it, then rename it over `path`."""
    _atomic_write(path, lambda fh: fh.write(data))


def save_torch(path: Path, obj: Any) -> None:
    """torch.save, atomically (a checkpoint is either the old one or the new one)."""
    import torch

    _atomic_write(path, lambda fh: torch.save(obj, fh))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_fmt(v) for v in row])
    atomic_write_text(path, buf.getvalue())


def _fmt(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return repr(value)  # shortest round-trip text: same value, same bytes
    return "" if value is None else value


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def finite_or_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None
