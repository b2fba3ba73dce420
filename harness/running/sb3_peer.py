"""Stable-Baselines3's SAC as a peer implementation, trained under the harness's protocol.

SB3's own loop (`SAC.learn`) trains, with SB3's networks, replay buffer, exploration and update; a
callback holds it to the protocol of `harness.running.train` and writes the same run records
(results/README.md):

- environments: `gym.make(env_id)`, reset with the run seed first and without a seed after every
  episode end (SB3's DummyVecEnv seeded by `SAC(seed=...)`), as `LockstepEnvs` does;
- evaluation: after the update of each step in `Budget.eval_steps()`, through `harness.running.train.evaluate`
  itself (same vector env, reset seeds `eval_reset_seeds`, tanh of the mean mapped onto the bounds);
- updates: SB3 updates after env step t when t > learning_starts, from a buffer of t transitions;
  `spec_problems` refuses specs where that would be before the buffer holds a batch, so the count
  equals the native learner's (step > learning_starts and buffer >= batch_size);
- time limits: DummyVecEnv marks a truncation `TimeLimit.truncated` and SB3's ReplayBuffer
  (handle_timeout_termination, its default) stores it as not done, so its target bootstraps from the
  episode's last observation (`terminal_observation`), as the native learner's does.

Importing this module imports Stable-Baselines3; `harness.running.implementations` imports it only when an
sb3 run is asked for.
"""

from __future__ import annotations

import dataclasses
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from variants.learner import DIAGNOSTICS
from variants.spec import VariantSpec, field_names

from .. import records
from .envs import EnvInfo, EnvRef, as_ref, env_info, make_vector_env
from .train import PROGRESS_EVERY, Interrupted, Job, MemberRecord, evaluate

# Spec fields handed on to SB3's constructor; SB3's code fixes every other field at SB3_FIXED's value.
PASSED_ON = (
    "gamma",
    "tau",
    "lr_actor",
    "lr_critic",
    "lr_alpha",
    "batch_size",
    "buffer_size",
    "learning_starts",
    "hidden_sizes",
    "initial_alpha",
    "target_entropy",
)
SB3_FIXED = dataclasses.replace(VariantSpec(), log_prob="naive")

# SB3's logged means of one update -> diagnostics.csv columns. SB3 logs its critic loss as
# 0.5 * (MSE1 + MSE2); the column holds MSE1 + MSE2 in every run, hence the factor 2.
LOGGED = {
    "critic_loss": ("train/critic_loss", 2.0),
    "actor_loss": ("train/actor_loss", 1.0),
    "alpha": ("train/ent_coef", 1.0),
    "alpha_loss": ("train/ent_coef_loss", 1.0),
}
LOSSES = ("critic_loss", "actor_loss", "alpha_loss")  # the ones whose non-finite values count, as natively


def spec_problems(spec: VariantSpec) -> list[str]:
    """Why SB3's SAC cannot train `spec` as specified: one text per problem, [] when it can."""
    problems = [
        f"{name}={getattr(spec, name)!r} (SB3 computes with {getattr(SB3_FIXED, name)!r})"
        for name in field_names()
        if name not in PASSED_ON and getattr(spec, name) != getattr(SB3_FIXED, name)
    ]
    if not spec.lr_actor == spec.lr_critic == spec.lr_alpha:
        problems.append("lr_actor, lr_critic and lr_alpha differ (SB3 has one learning rate)")
    if spec.learning_starts + 1 < spec.batch_size:
        problems.append(
            f"learning_starts={spec.learning_starts} < batch_size - 1 (SB3 would update from fewer "
            "transitions than a batch; the harness waits for a full one)"
        )
    return problems


class _EpisodeTotals(gym.Wrapper):
    """Sums an episode's rewards in float64 into the info of its last step: the vector env hands SB3
    float32 rewards, train.csv keeps the environment's own."""

    def reset(self, **kwargs):
        self._return, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            info = {**info, "episode_return": self._return, "episode_length": self._length}
        return obs, reward, terminated, truncated, info


def build_model(spec: VariantSpec, env_id: EnvRef | str, seed: int, total_steps: int, device: str = "cpu") -> SAC:
    """SB3's SAC with `spec`'s settings on one `env_id` env; `seed` seeds SB3's RNGs and the env's first reset."""
    problems = spec_problems(spec)
    if problems:
        raise ValueError("Stable-Baselines3's SAC cannot train this spec: " + "; ".join(problems))
    vec_env = DummyVecEnv([lambda: _EpisodeTotals(as_ref(env_id).make())])
    model = SAC(
        "MlpPolicy",
        vec_env,
        learning_rate=spec.lr_actor,
        buffer_size=min(spec.buffer_size, total_steps),  # as the native buffer: never wraps within a run
        learning_starts=spec.learning_starts,
        batch_size=spec.batch_size,
        tau=spec.tau,
        gamma=spec.gamma,
        train_freq=1,
        gradient_steps=1,
        ent_coef=f"auto_{spec.initial_alpha!r}",
        target_entropy=spec.resolved_target_entropy(int(np.prod(vec_env.action_space.shape))),
        use_sde=False,
        policy_kwargs={"net_arch": list(spec.hidden_sizes)},
        seed=int(seed),
        device=device,
        verbose=0,
    )
    # A logger that keeps the means in memory only: SB3's default makes an empty temp folder per learn().
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


class MeanAction:
    """SB3's deterministic action tanh(mean), in [-1, 1], in the form `harness.running.train.evaluate` asks for."""

    def __init__(self, model: SAC):
        self.model = model

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        s, n, _ = obs.shape
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(s * n, -1), device=self.model.device)
        return self.model.actor(x, deterministic=deterministic).cpu().numpy().reshape(s, n, -1)


class _Protocol(BaseCallback):
    """Records one run as `harness.running.train` does, and stops SB3's loop on request or divergence.

    SB3's loop per env step t: `on_rollout_start`, act, env step (t counted), `on_step`, store, then the
    update of step t. So what follows step t's update (diagnostics, evaluation) happens at the next
    `on_rollout_start`, and after the last step at `on_training_end`.
    """

    def __init__(
        self,
        job: Job,
        member: MemberRecord,
        info: EnvInfo,
        eval_env,
        on_progress: Callable[[int], None] | None,
        should_stop: Callable[[], bool],
    ):
        super().__init__()
        self.job, self.member, self.info, self.eval_env = job, member, info, eval_env
        self.on_progress, self.should_stop = on_progress, should_stop
        self.eval_steps = set(job.budget.eval_steps())
        self.updates_seen, self.reported, self.step_done = 0, 0, 0
        self.interrupted = False
        self._sums = dict.fromkeys(LOGGED, 0.0)
        self._interval_updates, self._nonfinite = 0, 0

    def _on_step(self) -> bool:
        step = self.num_timesteps
        totals = self.locals["infos"][0]
        if "episode_return" in totals:
            self.member.train_rows.append((step, totals["episode_return"], totals["episode_length"]))
        if self.on_progress is not None and step - self.reported >= PROGRESS_EVERY:
            self.on_progress(step - self.reported)
            self.reported = step
        if self.should_stop():
            self.interrupted = True
        return self.member.active and not self.interrupted

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps > 0:
            self._after_update(self.model.num_timesteps)

    def _on_training_end(self) -> None:
        if self.member.active and not self.interrupted and self.model.num_timesteps > self.step_done:
            self._after_update(self.model.num_timesteps)

    def _after_update(self, step: int) -> None:
        self.step_done = step
        if self.model._n_updates > self.updates_seen:
            self.updates_seen = self.model._n_updates
            logged = self.model.logger.name_to_value
            for column, (key, factor) in LOGGED.items():
                self._sums[column] += factor * float(logged[key])
            self._interval_updates += 1
            self._nonfinite += sum(not math.isfinite(float(logged[LOGGED[c][0]])) for c in LOSSES)
        budget = self.job.budget
        if self._nonfinite or step % budget.diag_every == 0 or step == budget.total_steps:
            self._record_diagnostics(step)
        if self.member.active and step in self.eval_steps:
            returns = evaluate(
                MeanAction(self.model), self.eval_env, self.info, (self.member.seed,), budget.eval_episodes
            )[0]
            self.member.eval_rows.append((step, float(returns.mean()), float(returns.std()), int(returns.size)))
            self.member.env_steps = step
            self.member.write_curves()

    def _record_diagnostics(self, step: int) -> None:
        """One diagnostics.csv row: means over the interval's updates of what SB3 logs, None (an empty
        cell) for what it does not; a non-finite loss or parameter marks the run diverged here."""
        n = self._interval_updates
        if n == 0:
            return
        params = [*self.model.actor.parameters(), *self.model.critic.parameters(), self.model.log_ent_coef]
        nonfinite = self._nonfinite + sum(int((~torch.isfinite(p.detach())).sum()) for p in params)
        values = {column: total / n for column, total in self._sums.items()} | {"nonfinite_count": float(nonfinite)}
        self.member.diag_rows.append((step, n, *(values.get(name) for name in DIAGNOSTICS)))
        self._sums = dict.fromkeys(LOGGED, 0.0)
        self._interval_updates, self._nonfinite = 0, 0
        if nonfinite > 0:
            self.member.stop(
                "diverged", f"non-finite loss or parameter ({nonfinite} values) in the updates up to this step", step
            )


def train_job(
    job: Job,
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> list[dict]:
    """Train every seed of `job` with SB3's SAC, one after another; returns the runs.csv rows.

    SB3 keeps no checkpoint: when `should_stop()` turns true the run in progress is abandoned
    (no status.json, so a rerun trains it again from its start) and `Interrupted` is raised.
    `on_progress(n)` is told n new env steps per seed of the job, as the native learner tells it.
    """
    progress = _PerSeedProgress(len(job.seeds), on_progress)
    return [_train_run(dataclasses.replace(job, seeds=(seed,)), progress, should_stop) for seed in job.seeds]


class _PerSeedProgress:
    """Turns the env steps of runs trained one after another into steps per seed of the job."""

    def __init__(self, seeds: int, on_progress: Callable[[int], None] | None):
        self.seeds, self.on_progress, self.steps, self.told = seeds, on_progress, 0, 0

    def __call__(self, n: int) -> None:
        self.steps += n
        per_seed = self.steps // self.seeds
        if self.on_progress is not None and per_seed > self.told:
            self.on_progress(per_seed - self.told)
            self.told = per_seed


def _train_run(job: Job, on_progress: Callable[[int], None], should_stop: Callable[[], bool]) -> dict:
    start = time.perf_counter()
    seed, budget = job.seeds[0], job.budget
    member = MemberRecord(seed, records.run_dir(Path(job.out), job.env_id, job.variant, seed))
    config = job.run_config(seed)
    config["versions"] = {**config["versions"], "stable_baselines3": stable_baselines3.__version__}
    records.write_json(member.path / "config.json", config)
    info = env_info(job.environment)
    eval_env = make_vector_env(job.environment, budget.eval_episodes)
    model, protocol = None, _Protocol(job, member, info, eval_env, on_progress, should_stop)
    try:
        model = build_model(job.spec, job.environment, seed, budget.total_steps, job.device)
        model.learn(total_timesteps=budget.total_steps, callback=protocol)
    except (Interrupted, records.WriteError):
        raise
    except Exception as exc:  # recorded as failed, as a native run's exception is
        if member.active:
            text = f"{type(exc).__name__}: {exc}".strip()
            member.stop("failed", f"{text}\n{traceback.format_exc(limit=3)}", model.num_timesteps if model else 0)
    finally:
        eval_env.close()
        if model is not None:
            model.env.close()
    if protocol.interrupted:
        raise Interrupted(f"{job.key} stopped at env step {protocol.step_done}; it restarts from its start on a rerun")
    if member.active:
        member.env_steps = protocol.step_done
    if member.env_steps > protocol.reported:
        on_progress(member.env_steps - protocol.reported)
    member.write_curves()
    status = member.write_status(time.perf_counter() - start)
    return records.runs_row(job.env_id, job.variant, seed, status)


def updates_made(model: SAC) -> int:
    """Gradient updates SB3 has made so far."""
    return int(model._n_updates)
