"""Training one job: S seeds of one variant on one environment, as members of one batched learner.

The loop is SAC's usual one: act (uniform random until `learning_starts`), step, store, one gradient
update per environment step, evaluate 20 times. Everything the run produces is written as run records
(results/README.md); nothing else leaves this module.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from variants.actions import env_action
from variants.buffer import ReplayBuffer
from variants.catalog import Implementation
from variants.learner import DIAGNOSTICS, SACLearner
from variants.rewards import transform_reward
from variants.spec import VariantSpec

from .. import machine, records
from ..records import identity
from .envs import EnvInfo, EnvRef, LockstepEnvs, env_info, eval_errors, make_vector_env
from .errors import Interrupted
from .policy import save_final_policy
from .profiles import Budget
from .tensorboard_log import ScalarLog

EVAL_SEED_BASE = 1_000_000
PROGRESS_EVERY = 500  # env steps between progress reports


@dataclass(frozen=True)
class Job:
    """What one worker trains. All members share variant, env and budget; each seed is one run."""

    variant: str
    description: str
    spec: VariantSpec
    overrides: dict
    env_id: str
    seeds: tuple[int, ...]
    budget: Budget
    out: str
    device: str = "cpu"
    command: tuple[str, ...] = ()
    implementation: Implementation = "native"  # the code that trains it (`harness.running.implementations`)
    env_ref: EnvRef | None = None  # how to make the env when it is not the registered id `env_id`
    normalization: dict | None = None  # {"target", "random"} given by --target / --random for env_id
    tensorboard: bool = False  # also write evaluation returns and diagnostics as TensorBoard scalars

    @property
    def environment(self) -> EnvRef:
        """The environment to make (`env_id` is its label in records and folders)."""
        return self.env_ref or EnvRef(self.env_id)

    @property
    def key(self) -> str:
        return f"{self.env_id}/{self.variant}/seeds {','.join(map(str, self.seeds))}"

    def identity_config(self, seed: int) -> dict:
        """The fields of `run_config(seed)` that `identity` reads, without provenance (cheap to build)."""
        return {
            "variant": self.variant,
            "implementation": self.implementation,
            "spec": self.spec.to_dict(),
            "env": self.env_id,
            "seed": seed,
            "budget": self.budget.to_dict(),
            "env_entry": self.environment.entry,
            "env_kwargs": self.environment.kwargs,
        }

    def run_config(self, seed: int) -> dict:
        """config.json of one run; its identity is everything but provenance (see `identity`)."""
        return {
            "variant": self.variant,
            "implementation": self.implementation,
            "description": self.description,
            "spec": self.spec.to_dict(),
            "overrides": dict(self.overrides),
            "env": self.env_id,
            "seed": seed,
            "budget": self.budget.to_dict(),
            "device": self.device,
            "members": len(self.seeds),
            "versions": machine.package_versions(),
            "git_commit": machine.git_commit(),
            "platform": machine.platform_info(),
            "command": list(self.command),
            "env_entry": self.environment.entry,
            "env_kwargs": self.environment.kwargs,
            "differences": {k: a for k, (a, _) in self.spec.differences(VariantSpec()).items()},
            "normalization": self.normalization,
        }


def no_update_reason(spec: VariantSpec, total_steps: int) -> str | None:
    """Why a run of `spec` over `total_steps` env steps would make no gradient update, or None.

    The loop updates after step t when t > learning_starts and the buffer holds a batch; the buffer
    holds at most min(buffer_size, total_steps) transitions.
    """
    collectable = min(spec.buffer_size, total_steps)
    if spec.batch_size > collectable:
        return (
            f"batch_size={spec.batch_size} exceeds the {collectable} transitions the run can collect "
            f"(the smaller of buffer_size and its {total_steps} env steps)"
        )
    if spec.learning_starts >= total_steps:
        return f"learning_starts={spec.learning_starts} is not below the run's {total_steps} env steps"
    return None


@dataclass
class MemberRecord:
    """What one member (one run) has produced so far."""

    seed: int
    path: Path
    eval_rows: list = field(default_factory=list)
    train_rows: list = field(default_factory=list)
    diag_rows: list = field(default_factory=list)
    state: str = "complete"
    error: str | None = None
    error_step: int | None = None
    env_steps: int = 0

    @property
    def active(self) -> bool:
        return self.error is None

    def stop(self, state: str, error: str, step: int) -> None:
        self.state, self.error, self.error_step, self.env_steps = state, error, step, step

    def returns(self) -> tuple[float | None, float | None]:
        if not self.eval_rows:
            return None, None
        means = [row[1] for row in self.eval_rows]
        return records.finite_or_none(means[-1]), records.finite_or_none(float(np.mean(means)))

    def snapshot(self) -> dict:
        """What a checkpoint keeps of this member (plain lists, loadable with weights_only)."""
        return {
            "eval_rows": list(self.eval_rows),
            "train_rows": list(self.train_rows),
            "diag_rows": list(self.diag_rows),
            "state": self.state,
            "error": self.error,
            "error_step": self.error_step,
            "env_steps": self.env_steps,
        }

    def restore(self, saved: dict) -> None:
        self.eval_rows = [tuple(r) for r in saved["eval_rows"]]
        self.train_rows = [tuple(r) for r in saved["train_rows"]]
        self.diag_rows = [tuple(r) for r in saved["diag_rows"]]
        self.state, self.error, self.error_step = saved["state"], saved["error"], saved["error_step"]
        self.env_steps = int(saved["env_steps"])

    def write_curves(self) -> None:
        records.write_csv(self.path / "eval.csv", records.EVAL_COLUMNS, self.eval_rows)
        records.write_csv(self.path / "train.csv", records.TRAIN_COLUMNS, self.train_rows)
        records.write_csv(self.path / "diagnostics.csv", ("env_step", "updates", *DIAGNOSTICS), self.diag_rows)

    def write_status(self, wall_s: float) -> dict:
        final, auc = self.returns()
        status = {
            "state": self.state,
            "env_steps": self.env_steps,
            "wall_s": round(wall_s, 3),
            "steps_per_s": round(self.env_steps / wall_s, 3) if wall_s > 0 else None,
            "error": self.error,
            "error_step": self.error_step,
            "final_return": final,
            "auc_return": auc,
        }
        records.write_json(self.path / "status.json", status)
        return status


def store_transition(
    buffer: ReplayBuffer,
    spec: VariantSpec,
    env_id: str,
    obs: np.ndarray,
    action: np.ndarray,
    reward: np.ndarray,
    final_obs: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> np.ndarray:
    """Store one lockstep's transitions; returns which envs' episodes ended.

    The stored next observation is the one the episode actually reached (`final_obs`, not the reset
    observation that follows an episode end), and only `terminated` stops bootstrapping: a time-limit
    truncation is not an end of the MDP, so its target still bootstraps from the final observation.
    """
    buffer.add(obs, action, transform_reward(reward, spec.reward, env_id, spec.reward_scale), final_obs, terminated)
    return terminated | truncated


def eval_reset_seeds(seeds: tuple[int, ...], episodes: int) -> list[int]:
    """Reset seeds of the evaluation episodes, seed-major: episode j of run seed k gets 10^6 + 1000k + j."""
    return [EVAL_SEED_BASE + 1000 * seed + j for seed in seeds for j in range(episodes)]


def evaluate(learner: SACLearner, eval_env, info: EnvInfo, seeds: tuple[int, ...], episodes: int) -> np.ndarray:
    """Mean-action returns, (S, episodes), on eval envs reset with the same seeds at every call.

    `learner` needs only `act(obs (S, N, O), deterministic=True) -> actions in [-1, 1] (S, N, A)`.
    """
    s = len(seeds)
    obs, _ = eval_env.reset(seed=eval_reset_seeds(seeds, episodes))
    returns = np.zeros(s * episodes)
    finished = np.zeros(s * episodes, dtype=bool)
    while not finished.all():
        action = learner.act(obs.reshape(s, episodes, -1), deterministic=True).reshape(s * episodes, -1)
        obs, reward, terminated, truncated, _ = eval_env.step(env_action(action, info.low, info.high, "affine", True))
        returns += np.where(finished, 0.0, reward)
        finished |= terminated | truncated
    return returns.reshape(s, episodes)


def checkpoint_path(job: Job) -> Path:
    return Path(job.out) / "checkpoints" / job.env_id / job.variant / f"seeds_{'-'.join(map(str, job.seeds))}.pt"


def checkpoint_steps(budget: Budget) -> set[int]:
    """A checkpoint every tenth of the budget (the last tenth is the finished run itself)."""
    return {round(i * budget.total_steps / 10) for i in range(1, 10)} - {0}


def checkpoint_previous(path: Path) -> Path:
    """Where the checkpoint before `path`'s current one is kept until the next one is complete."""
    return path.with_name(path.name + ".prev")


def set_history_aside(members: list[MemberRecord], when: str) -> list[Path]:
    """Rename each member's curves to `<name>.corrupt-<when>` (kept, never deleted); returns the new paths."""
    kept = []
    for m in members:
        for name in ("eval.csv", "train.csv", "diagnostics.csv"):
            if (m.path / name).exists():
                aside = m.path / f"{name}.corrupt-{when}"
                (m.path / name).replace(aside)
                kept.append(aside)
    return kept


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # a worker's stderr is the grid's terminal or log


class Training:
    """One job's learner, buffer, environments and loop counters: started fresh or resumed from the
    job's checkpoint (or the one before it, when the newest cannot be read)."""

    def __init__(self, job: Job, info: EnvInfo, members: list[MemberRecord], envs: LockstepEnvs, started: float):
        self.job, self.info, self.members, self.envs, self.started = job, info, members, envs, started
        self.ckpt = checkpoint_path(job)
        self.identities = [identity(job.run_config(seed)) for seed in job.seeds]
        self.step, self.elapsed_before = 0, 0.0
        self.reported = 0  # the env step up to which progress has been reported
        self._build()

    def _build(self) -> None:
        job, info, s = self.job, self.info, len(self.job.seeds)
        device = torch.device(job.device)
        self.learner = SACLearner(job.spec, info.obs_dim, info.act_dim, info.action_scale, job.seeds, device)
        capacity = min(job.spec.buffer_size, job.budget.total_steps)
        self.buffer = ReplayBuffer(s, capacity, info.obs_dim, info.act_dim, device)
        self.ep_return, self.ep_len = np.zeros(s), np.zeros(s, dtype=np.int64)

    def start(self) -> None:
        """Resume from the newest readable checkpoint of this configuration, else reset to step 0.

        A checkpoint file that exists but cannot be read (truncated, corrupt) never costs the run's
        history: the one before it is tried, and where none can be read the run restarts from step 0
        with its curves so far kept aside as `<name>.corrupt-<time>`, and says so.
        """
        unreadable = []
        for path in (self.ckpt, checkpoint_previous(self.ckpt)):
            if not path.exists():
                continue
            try:
                state = torch.load(path, weights_only=True, map_location=torch.device(self.job.device))
                if state.get("identities") != self.identities:
                    continue  # another configuration's: not this run's history
                self._restore(state)
                return
            except Exception as exc:  # a damaged file: torch's unpickling, or a restore from bad tensors
                unreadable.append(f"{path.name} ({type(exc).__name__})")
                self._build()  # a restore that failed half way leaves nothing behind
        if unreadable:
            when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            kept = set_history_aside(self.members, when)
            _say(
                f"{self.job.key}: checkpoint unreadable ({', '.join(unreadable)}); restarting from env step 0"
                + (f", its history so far kept as *.corrupt-{when} ({len(kept)} files)" if kept else "")
            )
            for m in self.members:
                m.restore(MemberRecord(m.seed, m.path).snapshot())
        self.obs = self.envs.reset(list(self.job.seeds))

    def _restore(self, state: dict) -> None:
        self.learner.load_state_dict(state["learner"])
        self.buffer.load_state_dict(state["buffer"])
        self.obs = self.envs.load_state_dict(state["envs"])
        self.step, self.elapsed_before = int(state["step"]), float(state["elapsed"])
        self.ep_return, self.ep_len = state["ep_return"].numpy().copy(), state["ep_len"].numpy().copy()
        for m, saved in zip(self.members, state["members"]):
            m.restore(saved)
        self.reported = self.step

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.started

    def save_checkpoint(self) -> None:
        """Write the checkpoint; the one it replaces stays as `.prev` until this one is complete."""
        if self.ckpt.exists():
            self.ckpt.replace(checkpoint_previous(self.ckpt))
        records.save_torch(
            self.ckpt,
            {
                "identities": self.identities,
                "step": self.step,
                "elapsed": self.elapsed(),
                "learner": self.learner.state_dict(),
                "buffer": self.buffer.state_dict(),
                "envs": self.envs.state_dict(),
                "ep_return": torch.as_tensor(self.ep_return),
                "ep_len": torch.as_tensor(self.ep_len),
                "members": [m.snapshot() for m in self.members],
            },
        )

    def remove_checkpoints(self) -> None:
        self.ckpt.unlink(missing_ok=True)
        checkpoint_previous(self.ckpt).unlink(missing_ok=True)

    def advance(self) -> None:
        """One env step of every member, its transitions stored, and one update when due."""
        spec, info, members = self.job.spec, self.info, self.members
        if self.step < spec.learning_starts:
            action = self.learner.random_actions()
        else:
            action = self.learner.act(self.obs[:, None, :], deterministic=False)[:, 0, :]
        to_env = env_action(action, info.low, info.high, spec.action_rescale, deterministic=False)
        to_env[[not m.active for m in members]] = 0.0  # a diverged member's NaNs stay out of its env
        next_obs, reward, terminated, truncated, final_obs = self.envs.step(to_env)
        for m, error in zip(members, self.envs.errors):
            if error is not None and m.active:  # its environment failed: this member ends, the others go on
                m.stop("failed", f"environment error: {error}", self.step)
        done = store_transition(
            self.buffer, spec, self.job.environment.entry, self.obs, action, reward, final_obs, terminated, truncated
        )
        self.obs = next_obs
        self.step += 1
        self.ep_return += reward
        self.ep_len += 1
        for i in np.flatnonzero(done):
            if members[i].active:
                members[i].train_rows.append((self.step, float(self.ep_return[i]), int(self.ep_len[i])))
            self.ep_return[i], self.ep_len[i] = 0.0, 0
        if self.step > spec.learning_starts and self.buffer.size >= spec.batch_size:
            self.learner.update(self.buffer.sample(spec.batch_size, self.learner.generators))

    def record_evaluation(self, eval_env) -> None:
        """Evaluate every member; a member whose evaluation environment failed ends there."""
        returns = evaluate(self.learner, eval_env, self.info, self.job.seeds, self.job.budget.eval_episodes)
        errors = eval_errors(eval_env, len(self.members), self.job.budget.eval_episodes)
        for m, r, error in zip(self.members, returns, errors):
            if error is not None and m.active:
                m.stop("failed", f"evaluation environment error: {error}", self.step)
            if m.active:
                m.eval_rows.append((self.step, float(r.mean()), float(r.std()), int(r.size)))
                m.env_steps = self.step
                m.write_curves()


def train_job(
    job: Job,
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[dict]:
    """Train every seed of `job`, write its run records, and return the runs.csv rows.

    Resumes from the job's checkpoint when one exists. `on_progress(n)` is told every n new env steps;
    when `should_stop()` turns true the job writes a checkpoint and raises `Interrupted`.
    """
    start = time.perf_counter()
    info = env_info(job.environment)
    members = [MemberRecord(seed, records.run_dir(Path(job.out), job.env_id, job.variant, seed)) for seed in job.seeds]
    for m in members:
        records.write_json(m.path / "config.json", job.run_config(m.seed))
    envs = LockstepEnvs(job.environment, len(job.seeds))
    eval_env = make_vector_env(job.environment, len(job.seeds) * job.budget.eval_episodes, guarded=True)
    run: Training | None = None
    scalars = None
    try:
        run = Training(job, info, members, envs, start)
        run.start()
        scalars = ScalarLog(members, run.step) if job.tensorboard else None
        _loop(run, eval_env, scalars, on_progress, should_stop)
    except (Interrupted, records.WriteError):
        raise
    except Exception as exc:  # the run is recorded as failed and the grid goes on
        text = f"{type(exc).__name__}: {exc}".strip()
        detail = traceback.format_exc(limit=3)
        for m in members:
            if m.active:
                m.stop("failed", f"{text}\n{detail}", run.step if run is not None else 0)
    finally:
        envs.close()
        eval_env.close()
        if scalars is not None:
            scalars.close(members)
    if on_progress is not None and run is not None and run.step > run.reported:
        on_progress(run.step - run.reported)
    rows = _finish(run, members, info, job, run.elapsed() if run is not None else time.perf_counter() - start)
    if run is not None:
        run.remove_checkpoints()
    else:
        checkpoint_path(job).unlink(missing_ok=True)
    return rows


def _loop(
    run: Training,
    eval_env,
    scalars: ScalarLog | None,
    on_progress: Callable[[int], None] | None,
    should_stop: Callable[[], bool],
) -> None:
    """Train `run` to its budget, or until no member is active."""
    budget, members = run.job.budget, run.members
    eval_steps, save_steps = set(budget.eval_steps()), checkpoint_steps(budget)
    while run.step < budget.total_steps:
        if should_stop():
            run.save_checkpoint()
            raise Interrupted(
                f"{run.job.key} stopped at env step {run.step}; a rerun resumes it there from its checkpoint"
            )
        run.advance()
        step = run.step
        if step % budget.diag_every == 0 or step == budget.total_steps:
            _record_diagnostics(run.learner, members, step)
        if step in eval_steps:
            run.record_evaluation(eval_env)
            if scalars is not None:
                scalars.flush(members)
        if not any(m.active for m in members):
            break
        if step in save_steps:
            run.save_checkpoint()
        if on_progress is not None and step - run.reported >= PROGRESS_EVERY:
            on_progress(step - run.reported)
            run.reported = step


def _finish(run: Training | None, members: list[MemberRecord], info: EnvInfo, job: Job, wall: float) -> list[dict]:
    """Write every member's final records (policy, curves, status.json); returns the runs.csv rows."""
    rows = []
    for i, m in enumerate(members):
        if m.active and run is not None:
            m.env_steps = run.step
            save_final_policy(m.path, run.learner, i, info, job.run_config(m.seed), run.step)
        m.write_curves()
        status = m.write_status(wall)
        rows.append(records.runs_row(job.env_id, job.variant, m.seed, status))
    return rows


def _record_diagnostics(learner: SACLearner, members: list[MemberRecord], step: int) -> None:
    n, values = learner.read_diagnostics()
    if n == 0:
        return
    nonfinite = values[:, DIAGNOSTICS.index("nonfinite_count")]
    for m, row, bad in zip(members, values, nonfinite):
        if not m.active:
            continue
        m.diag_rows.append((step, n, *(float(v) for v in row)))
        if bad > 0:
            m.stop("diverged", f"non-finite loss or parameter ({int(bad)} values) in the updates up to this step", step)
