"""`python -m harness bench`: what one SAC update costs, against the FLOP floor and Stable-Baselines3.

Printed in one run, on one torch thread:
- the time of one full update (S = 1) of the reference variant on Pendulum-v1's dimensions;
- its GEMM FLOP count, and the floor: the same GEMMs (shapes derived from the networks) timed alone;
- member scaling: time per member-update for S = 1, 4, 8, 16;
- end to end: environment steps per second on Pendulum-v1 with one update per step (the training loop
  of `harness.train` without evaluations), and Stable-Baselines3's SAC at identical settings when it is
  installed (`pip install -e ".[bench]"`), with the ratio.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import numpy as np
import torch

from variants.actions import env_action
from variants.buffer import ReplayBuffer
from variants.catalog import REFERENCE
from variants.learner import SACLearner
from variants.spec import VariantSpec

from .envs import LockstepEnvs, env_info
from .train import store_transition

Gemm = tuple[int, int, int, int]  # (batch count, m, k, n): `batch` products of (m x k) @ (k x n)


def update_gemms(obs_dim: int, act_dim: int, hidden: Sequence[int], batch: int, members: int) -> list[Gemm]:
    """The matrix products of one sequential SAC update (forward and backward), for S members.

    Critic twins are stacked, so critic products have 2S batch entries. The first layer's input
    gradient is never needed (observations and stored actions need no gradient), except for the
    critic on the policy's actions, whose gradient flows back into the actor.
    """
    actor = [obs_dim, *hidden, 2 * act_dim]
    critic = [obs_dim + act_dim, *hidden, 1]

    def forward(sizes, copies):
        return [(members * copies, batch, i, o) for i, o in zip(sizes[:-1], sizes[1:])]

    def weight_grads(sizes, copies):
        return [(members * copies, i, batch, o) for i, o in zip(sizes[:-1], sizes[1:])]

    def input_grads(sizes, copies, include_first):
        layers = list(zip(sizes[:-1], sizes[1:]))
        return [(members * copies, batch, o, i) for i, o in (layers if include_first else layers[1:])]

    return (
        forward(actor, 1) + forward(critic, 2)  # TD target: policy on s', target critics
        + forward(critic, 2) + weight_grads(critic, 2) + input_grads(critic, 2, False)  # critic loss
        + forward(actor, 1) + forward(critic, 2) + input_grads(critic, 2, True)  # actor loss through Q
        + weight_grads(actor, 1) + input_grads(actor, 1, False)
    )


def gemm_flops(gemms: Sequence[Gemm]) -> int:
    return sum(2 * b * m * k * n for b, m, k, n in gemms)


def _median_ms(fn: Callable[[], None], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_gemms(gemms: Sequence[Gemm], repeats: int, device: torch.device) -> float:
    """Median ms of running every product of `gemms` once (preallocated operands and outputs)."""
    ops = []
    for b, m, k, n in gemms:
        x, w = torch.randn(b, m, k, device=device), torch.randn(b, k, n, device=device)
        ops.append((x, w, torch.empty(b, m, n, device=device)))

    def run():
        for x, w, out in ops:
            torch.bmm(x, w, out=out)
        _sync(device)

    return _median_ms(run, repeats, max(3, repeats // 10))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _filled_buffer(members: int, obs_dim: int, act_dim: int, device: torch.device) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(members, 5000, obs_dim, act_dim, device)
    for _ in range(5000):
        buf.add(rng.normal(size=(members, obs_dim)), rng.uniform(-1, 1, (members, act_dim)),
                rng.normal(size=members), rng.normal(size=(members, obs_dim)), np.zeros(members))
    return buf


def time_update(spec: VariantSpec, members: int, repeats: int, device: torch.device, env_id: str = "Pendulum-v1") -> float:
    """Median ms of one full update (batch sampling included) of `members` members."""
    info = env_info(env_id)
    learner = SACLearner(spec, info.obs_dim, info.act_dim, info.action_scale, list(range(members)), device)
    buf = _filled_buffer(members, info.obs_dim, info.act_dim, device)

    def run():
        learner.update(buf.sample(spec.batch_size, learner.generators))
        _sync(device)

    return _median_ms(run, repeats, max(5, repeats // 10))


def env_steps_per_second(spec: VariantSpec, steps: int, device: torch.device, env_id: str = "Pendulum-v1") -> float:
    """Steps per second of sacbench's training loop (act, step, store, update), no evaluations."""
    info = env_info(env_id)
    learner = SACLearner(spec, info.obs_dim, info.act_dim, info.action_scale, [0], device)
    buffer = ReplayBuffer(1, steps, info.obs_dim, info.act_dim, device)
    envs = LockstepEnvs(env_id, 1)
    obs = envs.reset([0])
    start = time.perf_counter()
    for step in range(steps):
        if step < spec.learning_starts:
            action = learner.random_actions()
        else:
            action = learner.act(obs[:, None, :], deterministic=False)[:, 0, :]
        next_obs, reward, terminated, truncated, final_obs = envs.step(
            env_action(action, info.low, info.high, spec.action_rescale, deterministic=False))
        store_transition(buffer, spec, env_id, obs, action, reward, final_obs, terminated, truncated)
        obs = next_obs
        if step + 1 > spec.learning_starts:
            learner.update(buffer.sample(spec.batch_size, learner.generators))
    _sync(device)
    envs.close()
    return steps / (time.perf_counter() - start)


def sb3_steps_per_second(spec: VariantSpec, steps: int, device: str, env_id: str = "Pendulum-v1") -> float | None:
    """Stable-Baselines3 SAC at the same settings, or None when SB3 is not installed."""
    try:
        from stable_baselines3 import SAC
    except ImportError:
        return None
    import gymnasium as gym

    model = SAC(
        "MlpPolicy", gym.make(env_id), learning_rate=spec.lr_actor, buffer_size=steps,
        learning_starts=spec.learning_starts, batch_size=spec.batch_size, tau=spec.tau, gamma=spec.gamma,
        train_freq=1, gradient_steps=1, ent_coef=f"auto_{spec.initial_alpha}",
        policy_kwargs={"net_arch": list(spec.hidden_sizes)}, seed=0, device=device, verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return steps / (time.perf_counter() - start)


def run_bench(device_name: str = "cpu", repeats: int = 100, e2e_steps: int = 3000,
              members: Sequence[int] = (1, 4, 8, 16)) -> list[str]:
    """Measure and return the printed table's lines."""
    torch.set_num_threads(1)
    device = torch.device(device_name)
    spec = REFERENCE
    info = env_info("Pendulum-v1")
    lines = [f"sacbench bench: reference on Pendulum-v1 dimensions (obs {info.obs_dim}, act {info.act_dim}), "
             f"hidden {'x'.join(map(str, spec.hidden_sizes))}, batch {spec.batch_size}, device {device}, "
             f"torch {torch.__version__}, {torch.get_num_threads()} thread"]
    update_ms = time_update(spec, 1, repeats, device)
    gemms = update_gemms(info.obs_dim, info.act_dim, spec.hidden_sizes, spec.batch_size, 1)
    floor_ms = time_gemms(gemms, repeats, device)
    flops = gemm_flops(gemms)
    lines += [
        f"full update, S=1:            {update_ms:8.2f} ms",
        f"its {len(gemms)} GEMMs:               {flops / 1e9:8.3f} GFLOP",
        f"floor (those GEMMs alone):   {floor_ms:8.2f} ms  ({flops / floor_ms / 1e6:.0f} GFLOP/s)",
        f"update / floor:              {update_ms / floor_ms:8.2f} x",
        "member scaling (time per member-update):",
    ]
    for s in members:
        ms = time_update(spec, s, max(10, repeats // s), device)
        lines.append(f"  S={s:<3d} {ms / s:8.2f} ms per member  ({ms:8.2f} ms per update of all members)")
    ours = env_steps_per_second(spec, e2e_steps, device)
    lines.append(f"end to end, Pendulum-v1, {e2e_steps} steps ({spec.learning_starts} warm-up), one update per step:")
    lines.append(f"  sacbench:            {ours:8.1f} env steps/s")
    theirs = sb3_steps_per_second(spec, e2e_steps, device_name)
    if theirs is None:
        lines.append('  Stable-Baselines3:   not installed (pip install -e ".[bench]")')
    else:
        lines.append(f"  Stable-Baselines3:   {theirs:8.1f} env steps/s  (sacbench / SB3 = {ours / theirs:.2f} x)")
    return lines
