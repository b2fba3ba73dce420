"""`python -m harness bench`: what one SAC update costs, against the FLOP floor and Stable-Baselines3.

Printed in one run, on one torch thread:
- the time of one full update (S = 1) of the reference variant on Pendulum-v1's dimensions;
- its GEMM FLOP count, and the floor: the same GEMMs (shapes derived from the networks) run back to back
  and nothing else, each in its fastest orientation, timed in rounds alternating with the update's;
- the same update with 16x16 networks: the per-update cost that does not scale with width;
- member scaling: time per member-update for S = 1, 4, 8, 16;
- end to end: environment steps per second on Pendulum-v1 with one update per step (the training loop
  of `harness.train` without evaluations), and Stable-Baselines3's SAC at identical settings when it is
  installed (`pip install -e ".[bench]"`), with the ratio.
"""

from __future__ import annotations

import dataclasses
import importlib.util
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


def _median_ms(fn: Callable[[], object], repeats: int, warmup: int) -> float:
    """Median ms of `repeats` calls of fn after `warmup` untimed ones (repeats >= 1)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _orientations(b: int, m: int, k: int, n: int, device: torch.device) -> list[Callable[[], torch.Tensor]]:
    """Ways to compute the same random products (m x k) @ (k x n), `b` of them, into preallocated outputs: as
    written, as the transpose of (b^T a^T), and for k = 1 as a broadcast multiply. The GEMM kernels'
    speed depends on the orientation (see `variants.networks.stacked_matmul`), the FLOPs do not."""
    x, w = torch.randn(b, m, k, device=device), torch.randn(b, k, n, device=device)
    out, out_t = torch.empty(b, m, n, device=device), torch.empty(b, n, m, device=device)
    ways = [lambda: torch.bmm(x, w, out=out), lambda: torch.bmm(w.mT, x.mT, out=out_t).mT]
    if k == 1:
        ways.append(lambda: torch.mul(x, w, out=out))
    return ways


def fastest_ways(gemms: Sequence[Gemm], device: torch.device, trials: int = 20) -> list[Callable[[], torch.Tensor]]:
    """Per product of `gemms`, the way to compute it (`_orientations`) with the lowest median time."""
    def timed(way):
        def run():
            way()
            _sync(device)
        return _median_ms(run, trials, 2)
    return [min(_orientations(*g, device), key=timed) for g in gemms]


def time_floor(ways: Sequence[Callable[[], torch.Tensor]], repeats: int, device: torch.device) -> float:
    """The floor: median ms of running every product once, back to back, as the update runs them
    (operands do not all stay in cache), each its fastest way, into preallocated outputs."""
    def run():
        for way in ways:
            way()
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


def update_runner(spec: VariantSpec, members: int, device: torch.device, env_id: str = "Pendulum-v1") -> Callable[[], None]:
    """A call that runs one full update (batch sampling included) of `members` members."""
    info = env_info(env_id)
    learner = SACLearner(spec, info.obs_dim, info.act_dim, info.action_scale, list(range(members)), device)
    buf = _filled_buffer(members, info.obs_dim, info.act_dim, device)

    def run():
        learner.update(buf.sample(spec.batch_size, learner.generators))
        _sync(device)

    return run


def time_update(spec: VariantSpec, members: int, repeats: int, device: torch.device, env_id: str = "Pendulum-v1") -> float:
    """Median ms of one full update (batch sampling included) of `members` members."""
    return _median_ms(update_runner(spec, members, device, env_id), repeats, max(5, repeats // 10))


def update_and_floor_rounds(spec: VariantSpec, gemms: Sequence[Gemm], repeats: int, rounds: int,
                            device: torch.device) -> list[tuple[float, float]]:
    """(update ms, floor ms) per round, the two timed alternately, `repeats` updates in all.

    A shared machine's speed drifts by tens of percent within a minute; timing the update and the
    floor in alternating rounds gives each round's ratio the same conditions on both sides.
    """
    update = update_runner(spec, 1, device)
    ways = fastest_ways(gemms, device)
    per_round = max(1, repeats // rounds)
    for _ in range(max(5, repeats // 10)):
        update()
    return [(_median_ms(update, per_round, 2), time_floor(ways, per_round, device)) for _ in range(rounds)]


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


def sb3_installed() -> bool:
    return importlib.util.find_spec("stable_baselines3") is not None


def sb3_steps_per_second(spec: VariantSpec, steps: int, device: str, env_id: str = "Pendulum-v1") -> float:
    """Stable-Baselines3 SAC at the same settings (needs the `bench` extra: see `sb3_installed`)."""
    from stable_baselines3 import SAC

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


ROUNDS = 5
E2E_ROUNDS = 2


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
    gemms = update_gemms(info.obs_dim, info.act_dim, spec.hidden_sizes, spec.batch_size, 1)
    rounds = update_and_floor_rounds(spec, gemms, repeats, ROUNDS, device)
    update_ms = statistics.median(u for u, _ in rounds)
    floor_ms = statistics.median(f for _, f in rounds)
    ratios = [u / f for u, f in rounds]
    flops = gemm_flops(gemms)
    lines += [
        f"full update, S=1:            {update_ms:8.2f} ms  (median of {len(rounds)} rounds)",
        f"its {len(gemms)} GEMMs:               {flops / 1e9:8.3f} GFLOP",
        f"floor (those GEMMs alone):   {floor_ms:8.2f} ms  ({flops / floor_ms / 1e6:.0f} GFLOP/s; "
        "back to back, each product in its fastest orientation)",
        f"update / floor:              {statistics.median(ratios):8.2f} x  (per round {min(ratios):.2f} to {max(ratios):.2f}, "
        "update and floor timed alternately)",
    ]
    # The same update on tiny networks: what an update costs whatever the width (Python, dispatch,
    # autograd, optimizer and elementwise-op overheads), the part a faster GEMM cannot remove.
    tiny = dataclasses.replace(spec, hidden_sizes=(16, 16))
    lines += [
        f"same update, 16x16 networks: {time_update(tiny, 1, repeats, device):8.2f} ms  (the cost that does not scale with width)",
        "member scaling (time per member-update):",
    ]
    for s in members:
        ms = time_update(spec, s, max(10, repeats // s), device)
        lines.append(f"  S={s:<3d} {ms / s:8.2f} ms per member  ({ms:8.2f} ms per update of all members)")
    lines.append(f"end to end, Pendulum-v1, {e2e_steps} steps ({spec.learning_starts} warm-up), one update per step:")
    if not sb3_installed():
        ours = env_steps_per_second(spec, e2e_steps, device)
        lines.append(f"  sacbench:            {ours:8.1f} env steps/s")
        lines.append('  Stable-Baselines3:   not installed (pip install -e ".[bench]")')
        return lines
    # Alternating runs, as above: each round's ratio compares the two under the same conditions.
    pairs = [(env_steps_per_second(spec, e2e_steps, device), sb3_steps_per_second(spec, e2e_steps, device_name))
             for _ in range(E2E_ROUNDS)]
    ratios = [ours / theirs for ours, theirs in pairs]
    lines.append(f"  sacbench:            {statistics.median(p[0] for p in pairs):8.1f} env steps/s  "
                 f"(median of {len(pairs)} runs alternating with SB3's)")
    lines.append(f"  Stable-Baselines3:   {statistics.median(p[1] for p in pairs):8.1f} env steps/s  "
                 f"(sacbench / SB3 = {statistics.median(ratios):.2f} x; per round "
                 + ", ".join(f"{r:.2f}" for r in ratios) + ")")
    return lines
