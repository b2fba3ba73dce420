"""Run records on disk: atomic writes, the run folder layout. See results/README.md; the machine and
software a run records as its provenance come from `harness.machine`."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from variants.spec import VariantSpec

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


# --- a run's configuration read back ------------------------------------------------------------


def recorded_spec(config: dict) -> dict:
    """The spec of a run's config.json as a dict of every current field. It is read back through
    `VariantSpec`, so a field added after the run was recorded takes its default (each field was added
    with a default that keeps the earlier arithmetic: old runs stay comparable). A spec this checkout
    cannot read (a newer version's field, a bad value) is its recorded fields over the defaults."""
    spec = config.get("spec") if isinstance(config, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    try:
        return VariantSpec.from_dict(spec).to_dict()
    except (TypeError, ValueError):
        return {**VariantSpec().to_dict(), **spec}


def identity(config: dict) -> dict:
    """The part of a run's config.json that decides what the run computes (so a rerun may reuse it):
    variant, implementation, spec (`recorded_spec`), env and how it was made, seed, budget."""
    out = {k: config.get(k) for k in ("variant", "env", "seed", "budget")}
    out["spec"] = recorded_spec(config)
    out["implementation"] = config.get("implementation", "native")  # runs recorded before the field were native
    # A registered id without kwargs is named by `env` alone, as in runs (and checkpoints) recorded
    # before other environments existed; any other env adds how it was made.
    entry, kwargs = config.get("env_entry") or config.get("env"), config.get("env_kwargs") or {}
    if entry != config.get("env") or kwargs:
        out["env_entry"], out["env_kwargs"] = entry, kwargs
    return out


# --- reading run folders: every record verified before it is trusted -----------------------------


class RunCheck(NamedTuple):
    """What a run folder's records say, once verified: `state` (one of STATES) for a finished run whose
    records agree, `problem` (one line) for one whose records are unreadable or disagree, neither for
    an unfinished run (no status.json yet)."""

    state: str | None
    problem: str | None


def _json_object(path: Path) -> dict:
    try:
        data = read_json(path)
    except FileNotFoundError:
        raise ValueError(f"no {path.name}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path.name} is not valid JSON ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return data


def _eval_means(path: Path) -> list[tuple[int, float]]:
    """(env_step, return_mean) of each row of an eval.csv; raises ValueError (one line) if it cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ValueError("no eval.csv") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"eval.csv cannot be read ({exc})") from None
    rows = list(csv.reader(lines))
    if not rows or tuple(rows[0]) != EVAL_COLUMNS:
        raise ValueError("eval.csv lacks its header")
    out = []
    for number, row in enumerate(rows[1:], start=2):
        try:
            if len(row) != len(EVAL_COLUMNS):
                raise ValueError
            out.append((int(row[0]), float(row[1])))
        except ValueError:
            raise ValueError(f"eval.csv line {number} is not a row of {len(EVAL_COLUMNS)} numbers") from None
    return out


def _budget_schedule(config: dict) -> tuple[int, list[int]]:
    """(total env steps, the env steps of its evaluations) of a config.json's budget."""
    budget = config.get("budget")
    try:
        total, points = int(budget["total_steps"]), int(budget["eval_points"])
    except (TypeError, KeyError, ValueError):
        raise ValueError("config.json has no readable budget") from None
    if total < 1 or not 1 <= points <= total:
        raise ValueError(f"config.json: budget of {total} steps and {points} evaluations is impossible")
    return total, [round(i * total / points) for i in range(1, points + 1)]


def _same(recorded: object, computed: float | None) -> bool:
    if computed is None or recorded is None:
        return recorded is None and computed is None
    return isinstance(recorded, (int, float)) and math.isclose(float(recorded), computed, rel_tol=1e-9, abs_tol=1e-12)


def _disagreement(status: dict, config: dict, evals: list[tuple[int, float]]) -> str | None:
    """Why status.json, config.json and eval.csv of one finished run disagree, or None."""
    state, steps = status.get("state"), status.get("env_steps")
    if state not in STATES:
        return f"status.json: state {state!r} is not one of {', '.join(STATES)}"
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        return f"status.json: env_steps {steps!r} is not a whole number"
    total, schedule = _budget_schedule(config)
    recorded = [step for step, _ in evals]
    if state == "complete" and steps != total:
        return f"a complete run of {steps:,} env steps, but its budget is {total:,}"
    if steps > total:
        return f"{steps:,} env steps recorded, past its budget of {total:,}"
    expected = [s for s in schedule if s <= steps] if state == "complete" else schedule[: len(recorded)]
    if recorded != expected or (recorded and recorded[-1] > steps):
        return f"eval.csv holds {len(recorded)} evaluations (last at step {recorded[-1] if recorded else 0:,}), " + (
            f"status.json says {steps:,} env steps of a {len(schedule)}-evaluation budget"
        )
    means = [mean for _, mean in evals]
    final = finite_or_none(means[-1]) if means else None
    auc = finite_or_none(float(np.mean(means))) if means else None
    for key, value in (("final_return", final), ("auc_return", auc)):
        if state != "complete" and status.get(key) is None:
            continue  # a run that did not complete may leave its returns unrecorded
        if not _same(status.get(key), value):
            return f"status.json {key} {status.get(key)!r} disagrees with eval.csv ({value!r})"
    return None


def check_run(path: Path) -> RunCheck:
    """Verify one run folder: a run counts as finished only when status.json, config.json and eval.csv
    agree (its state, its env steps against the budget, the evaluations the budget schedules up to
    them, final_return and auc_return against eval.csv's returns)."""
    path = Path(path)
    if not (path / "status.json").exists():
        return RunCheck(None, None)
    try:
        status, config = _json_object(path / "status.json"), _json_object(path / "config.json")
        problem = _disagreement(status, config, _eval_means(path / "eval.csv"))
    except ValueError as exc:
        problem = str(exc)
    return RunCheck(None, problem) if problem else RunCheck(status["state"], None)


def run_state(path: Path) -> str | None:
    """The recorded state of a finished run folder whose records agree (`check_run`), else None."""
    return check_run(path).state


def run_folders(out: Path) -> Iterator[tuple[Path, str, str, int]]:
    """(folder, env, variant, seed) of each `runs/<env>/<variant>/seed_<k>` folder under `out`, sorted."""
    for path in sorted(Path(out).glob("runs/*/*/seed_*")):
        try:
            seed = int(path.name.removeprefix("seed_"))
        except ValueError:
            continue
        if path.is_dir():
            yield path, path.parts[-3], path.parts[-2], seed


def collect_runs(out: Path, verified: bool = True) -> list[dict]:
    """runs.csv rows rebuilt from every finished run folder under `out` whose records agree; with
    `verified` false, from every readable status.json of a known state (for time estimates only)."""
    rows = []
    for path, env_id, variant, seed in run_folders(out):
        if verified and run_state(path) is None:
            continue
        try:
            status = read_json(path / "status.json")
        except (OSError, ValueError):
            continue
        if isinstance(status, dict) and status.get("state") in STATES:
            rows.append(runs_row(env_id, variant, seed, status))
    return rows


def inconsistent_runs(out: Path) -> list[tuple[str, str, int, str]]:
    """(env, variant, seed, problem) of each run folder under `out` whose records cannot be trusted."""
    found = []
    for path, env_id, variant, seed in run_folders(out):
        problem = check_run(path).problem
        if problem:
            found.append((env_id, variant, seed, problem))
    return found


def set_aside(out: Path, env_id: str, variant: str, seed: int) -> Path:
    """Move a run folder out of `runs/` (to `repaired/<env>/<variant>/seed_<k>-<time>`, kept, never
    deleted) so that the run is trained again; returns where it went."""
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = Path(out) / "repaired" / env_id / variant / f"seed_{seed}-{when}"
    target.parent.mkdir(parents=True, exist_ok=True)
    run_dir(out, env_id, variant, seed).replace(target)
    return target


def copy_run(source: Path, out: Path, env_id: str, variant: str, seed: int) -> bool:
    """Copy one finished run whose records agree (`run_state`) from the results folder `source` into
    `out`, where that run has no folder yet; True when copied. The copy lands whole or not at all (a
    scratch folder beside it, then one rename), and `source` is only read."""
    src, dst = run_dir(source, env_id, variant, seed), run_dir(out, env_id, variant, seed)
    if run_state(src) is None or dst.exists():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    scratch = dst.parent / f".{dst.name}.copy-{os.getpid()}"
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(src, scratch)
    try:
        scratch.rename(dst)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
        if not dst.exists():
            raise
        return False  # another process put the run there first: its folder stands
    return True


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


# A claim found held is tried again: probes (another grid planning, `harness status`) hold it for an instant
# only, a process that trains the run for as long as it trains.
CLAIM_ATTEMPTS = 3
CLAIM_RETRY_S = 0.1


def claim_run(out: Path, env_id: str, variant: str, seed: int) -> RunLock | None:
    """`try_lock_run`, tried CLAIM_ATTEMPTS times CLAIM_RETRY_S apart while another process holds it."""
    for _ in range(CLAIM_ATTEMPTS - 1):
        lock = try_lock_run(out, env_id, variant, seed)
        if lock is not None:
            return lock
        time.sleep(CLAIM_RETRY_S)
    return try_lock_run(out, env_id, variant, seed)


def claim_holder(out: Path, env_id: str, variant: str, seed: int) -> str | None:
    """None when no other process holds the run's claim (`claim_run`); else the pid recorded by the
    process that is training the run ('' when it cannot be read). Creates nothing where no process ever
    claimed the run (a planning or a dry run of a new folder leaves it as it was)."""
    if not run_lock_path(out, env_id, variant, seed).exists():
        return None
    lock = claim_run(out, env_id, variant, seed)
    if lock is None:
        return run_lock_holder(out, env_id, variant, seed)
    lock.release()
    return None


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


def create_json(path: Path, obj: Any) -> bool:
    """Write `obj` as JSON at `path` only if no file is there (atomically: complete or absent); returns
    whether this call created it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    atomic_write_text(tmp, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def finite_or_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


# --- what `harness status` shows of each run folder ------------------------------------------------


def _config_int(path: Path, *keys: str) -> int | None:
    """The integer at `keys` in a run folder's config.json, or None if it cannot be read."""
    try:
        value = read_json(path / "config.json")
        for key in keys:
            value = value[key]
        return int(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def budget_steps(path: Path) -> int | None:
    """A run folder's budget in env steps (config.json's), or None if it cannot be read."""
    return _config_int(path, "budget", "total_steps")


def recorded_members(path: Path) -> int:
    """How many seeds a run folder's job trained together (config.json's `members`); 1 if unreadable."""
    return max(1, _config_int(path, "members") or 1)


def recorded_steps(path: Path) -> tuple[int | None, int | None]:
    """(env steps recorded so far, the run's budget) of a run folder: the last diagnostics interval's
    env_step (0 before the first) and config.json's budget; None for what cannot be read."""
    total = budget_steps(path)
    try:
        lines = (path / "diagnostics.csv").read_text().split()
        done = int(lines[-1].split(",")[0]) if len(lines) > 1 else 0
    except (OSError, ValueError, IndexError):
        done = None
    return done, total


def folder_states(out: Path) -> list[dict]:
    """One row (env, variant, seed, state, holder, env_steps, total_steps, problem) per run folder under `out`: its
    recorded state, or for an unfinished one 'training' while a process holds its claim (holder: that
    pid) and 'stopped' otherwise (a rerun of its grid's command resumes it); for an unfinished one also
    the env steps recorded so far and its budget (`recorded_steps`; None elsewhere); 'inconsistent' where
    its records disagree (`check_run`; problem: why)."""
    rows = []
    for path in sorted(Path(out).glob("runs/*/*/seed_*")):
        env_id, variant = path.parts[-3], path.parts[-2]
        try:
            seed = int(path.name.removeprefix("seed_"))
        except ValueError:
            continue
        check = check_run(path)
        state, holder, done, total = check.state, None, None, None
        if check.problem is not None:
            state = "inconsistent"
        elif state is None:
            holder = claim_holder(out, env_id, variant, seed)
            state = "stopped" if holder is None else "training"
            done, total = recorded_steps(path)
        rows.append(
            {
                "env": env_id,
                "variant": variant,
                "seed": seed,
                "state": state,
                "holder": holder or "",
                "env_steps": done,
                "total_steps": total,
                "problem": check.problem or "",
            }
        )
    return rows


def still_to_come(out: Path) -> int:
    """Runs queued by the grids alive now on `out` (`live_queues`) and not yet finished: each run
    counted once, however many grids plan it (the same command started twice)."""
    queued = {run for queue in live_queues(out) for run in queue}
    return sum(run_state(run_dir(out, *run)) is None for run in queued)


def print_state_table(grid_rows: list[dict], log=print) -> dict[str, int]:
    """Print a table of run states (variant x env) of `grid_rows` (`collect_runs` or `folder_states` rows)
    with `log`; returns the counts per state."""
    counts: dict[str, int] = {}
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for r in grid_rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
        cell = cells.setdefault((r["variant"], r["env"]), {})
        cell[r["state"]] = cell.get(r["state"], 0) + 1
    envs = sorted({e for _, e in cells})
    width = max([len(v) for v, _ in cells] + [7])
    log("run states:")
    log("  " + "variant".ljust(width) + "".join(f"  {e:>26s}" for e in envs))
    for variant in dict.fromkeys(v for v, _ in cells):
        parts = []
        for e in envs:
            cell = cells.get((variant, e), {})
            parts.append(f"  {', '.join(f'{n} {k}' for k, n in sorted(cell.items())) or '-':>26s}")
        log("  " + variant.ljust(width) + "".join(parts))
    log("total: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return counts
