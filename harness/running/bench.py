"""`python -m harness bench`: what one SAC update costs, against the FLOP floor and Stable-Baselines3.

Printed in one run, on one torch thread, for each precision asked for (`VariantSpec.precision`; by
default fp32 and bf16):
- the time of one full update (S = 1) of the reference variant on Pendulum-v1's dimensions;
- its GEMM FLOP count, and each precision's floor: the same GEMMs (shapes derived from the networks)
  run back to back and nothing else, each its fastest way (orientation, and for bf16 also the dtype:
  bf16 or fp32, as the bf16 update picks); updates and floors timed in alternating rounds, every round
  printed;
- the same updates timed in blocks of consecutive calls, as training runs them (no other case's
  products between two updates), the precisions taking turns block by block;
- the same update with 16x16 networks: the per-update cost that does not scale with width;
- member scaling: time per member-update for S = 1, 4, 8, 16;
- end to end: environment steps per second on Pendulum-v1 with one update per step after the warm-up
  (the training loop of `harness.running.train` without evaluations), each precision and Stable-Baselines3's
  SAC at identical settings when it is installed (`pip install -e ".[bench]"`), in alternating runs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from variants.actions import env_action
from variants.buffer import ReplayBuffer
from variants.catalog import REFERENCE
from variants.learner import SACLearner
from variants.networks import PRECISIONS as NETWORK_PRECISIONS
from variants.spec import VariantSpec

from .. import machine
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
        forward(actor, 1)
        + forward(critic, 2)  # TD target: policy on s', target critics
        + forward(critic, 2)
        + weight_grads(critic, 2)
        + input_grads(critic, 2, False)  # critic loss
        + forward(actor, 1)
        + forward(critic, 2)
        + input_grads(critic, 2, True)  # actor loss through Q
        + weight_grads(actor, 1)
        + input_grads(actor, 1, False)
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


def _orientations(
    b: int, m: int, k: int, n: int, device: torch.device, dtype: torch.dtype = torch.float32
) -> list[Callable[[], torch.Tensor]]:
    """Ways to compute the same random products (m x k) @ (k x n), `b` of them, in `dtype`, into
    preallocated outputs: as written, as the transpose of (b^T a^T), and for k = 1 as a broadcast
    multiply. The GEMM kernels' speed depends on the orientation (see `variants.networks.stacked_matmul`),
    the FLOPs do not."""
    x, w = torch.randn(b, m, k, device=device, dtype=dtype), torch.randn(b, k, n, device=device, dtype=dtype)
    out = torch.empty(b, m, n, device=device, dtype=dtype)
    out_t = torch.empty(b, n, m, device=device, dtype=dtype)
    ways = [lambda: torch.bmm(x, w, out=out), lambda: torch.bmm(w.mT, x.mT, out=out_t).mT]
    if k == 1:
        ways.append(lambda: torch.mul(x, w, out=out))
    return ways


def fastest_ways(
    gemms: Sequence[Gemm], device: torch.device, trials: int = 20, dtypes: Sequence[torch.dtype] = (torch.float32,)
) -> list[Callable[[], torch.Tensor]]:
    """Per product of `gemms`, the way to compute it (`_orientations`, in any of `dtypes`) with the
    lowest median time."""

    def timed(way):
        def run():
            way()
            _sync(device)

        return _median_ms(run, trials, 2)

    return [min((way for dtype in dtypes for way in _orientations(*g, device, dtype)), key=timed) for g in gemms]


def floor_runner(ways: Sequence[Callable[[], torch.Tensor]], device: torch.device) -> Callable[[], None]:
    """A call of the floor: every product once, back to back, as the update runs them (operands do not
    all stay in cache), each its fastest way, into preallocated outputs."""

    def run():
        for way in ways:
            way()
        _sync(device)

    return run


def time_floor(ways: Sequence[Callable[[], torch.Tensor]], repeats: int, device: torch.device) -> float:
    """The floor: median ms of `floor_runner` calls."""
    return _median_ms(floor_runner(ways, device), repeats, max(3, repeats // 10))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _filled_buffer(members: int, obs_dim: int, act_dim: int, device: torch.device) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(members, 5000, obs_dim, act_dim, device)
    for _ in range(5000):
        buf.add(
            rng.normal(size=(members, obs_dim)),
            rng.uniform(-1, 1, (members, act_dim)),
            rng.normal(size=members),
            rng.normal(size=(members, obs_dim)),
            np.zeros(members),
        )
    return buf


def update_runner(
    spec: VariantSpec, members: int, device: torch.device, env_id: str = "Pendulum-v1"
) -> Callable[[], None]:
    """A call that runs one full update (batch sampling included) of `members` members."""
    info = env_info(env_id)
    learner = SACLearner(spec, info.obs_dim, info.act_dim, info.action_scale, list(range(members)), device)
    buf = _filled_buffer(members, info.obs_dim, info.act_dim, device)

    def run():
        learner.update(buf.sample(spec.batch_size, learner.generators))
        _sync(device)

    return run


def time_update(
    spec: VariantSpec, members: int, repeats: int, device: torch.device, env_id: str = "Pendulum-v1"
) -> float:
    """Median ms of one full update (batch sampling included) of `members` members."""
    return _median_ms(update_runner(spec, members, device, env_id), repeats, max(5, repeats // 10))


def alternating_rounds(cases: Sequence[Callable[[], float]], rounds: int, calls: int = 1) -> list[list[float]]:
    """Each case's figure in each of `rounds` rounds, [round][case]: the median of `calls` calls.

    A shared machine's speed drifts by tens of percent within seconds. The cases take turns call by
    call, so that each round's ratios compare them under the same conditions, and the order reverses
    at every turn, so that a steady drift does not always favour the case that runs first.
    """
    out = []
    for r in range(rounds):
        figures: list[list[float]] = [[] for _ in cases]
        for c in range(calls):
            order = range(len(cases)) if (r * calls + c) % 2 == 0 else reversed(range(len(cases)))
            for i in order:
                figures[i].append(cases[i]())
        out.append([statistics.median(f) for f in figures])
    return out


def _timed_ms(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3

    return run


def update_and_floor_rounds(
    updates: Sequence[Callable[[], None]],
    floors: Sequence[Sequence[Callable[[], torch.Tensor]]],
    repeats: int,
    rounds: int,
    device: torch.device,
) -> list[list[float]]:
    """Per round, the ms of one call of each update runner (`update_runner`) then of each floor (every
    product of a list of ways once, back to back, as `time_floor`), medians of `repeats // rounds`
    calls each, the cases taking turns call by call."""
    for update in updates:
        for _ in range(max(5, repeats // 10)):
            update()
    runs = [*updates, *(floor_runner(ways, device) for ways in floors)]
    for run in runs[len(updates) :]:
        for _ in range(3):
            run()
    cases = [_timed_ms(run) for run in runs]
    return alternating_rounds(cases, rounds, max(1, repeats // rounds))


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
            env_action(action, info.low, info.high, spec.action_rescale, deterministic=False)
        )
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
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import Logger

    model = SAC(
        "MlpPolicy",
        gym.make(env_id),
        learning_rate=spec.lr_actor,
        buffer_size=steps,
        learning_starts=spec.learning_starts,
        batch_size=spec.batch_size,
        tau=spec.tau,
        gamma=spec.gamma,
        train_freq=1,
        gradient_steps=1,
        ent_coef=f"auto_{spec.initial_alpha}",
        policy_kwargs={"net_arch": list(spec.hidden_sizes)},
        seed=0,
        device=device,
        verbose=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes an empty temp folder per learn()
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return steps / (time.perf_counter() - start)


ROUNDS = 5
E2E_ROUNDS = 2
PRECISIONS = ("fp32", "bf16")


def _floor_dtypes(precision: str) -> tuple[torch.dtype, ...]:
    """The dtypes a precision's floor may compute a product in: its own and float32, as the learner
    computes the narrow layers in float32 where the precision's products are slower
    (`variants.networks.layer_dtypes`)."""
    own = NETWORK_PRECISIONS[precision]
    return (own,) if own == torch.float32 else (own, torch.float32)


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no (bf16 products emulated: many times slower)"


def _spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return ", ".join(fmt.format(v) for v in values)


def _update_lines(precisions: Sequence[str], rounds: list[list[float]], flops: int, gemm_count: int) -> list[str]:
    """The S = 1 table: every round, the medians, and each ratio with its per-round values."""
    n = len(precisions)
    updates = {p: [r[i] for r in rounds] for i, p in enumerate(precisions)}
    floors = {p: [r[n + i] for r in rounds] for i, p in enumerate(precisions)}
    header = "".join(f"{p + ' update':>13s}" for p in precisions) + "".join(f"{p + ' floor':>13s}" for p in precisions)
    lines = [
        f"S=1, ms per call, {len(rounds)} rounds (updates and floors timed alternately):",
        f"  {'round':>6s}{header}",
    ]
    for k, r in enumerate(rounds):
        lines.append(f"  {k + 1:6d}" + "".join(f"{v:13.2f}" for v in r))
    lines.append(
        f"  {'median':>6s}" + "".join(f"{statistics.median(v):13.2f}" for v in [*updates.values(), *floors.values()])
    )
    lines.append(f"its {gemm_count} GEMMs:               {flops / 1e9:8.3f} GFLOP")
    for p in precisions:
        update_ms, floor_ms = statistics.median(updates[p]), statistics.median(floors[p])
        ratios = [u / f for u, f in zip(updates[p], floors[p])]
        lines += [
            f"full update, S=1, {p}:      {update_ms:8.2f} ms  (median of {len(rounds)} rounds)",
            f"floor (those GEMMs alone), {p}: {floor_ms:6.2f} ms  ({flops / floor_ms / 1e6:.0f} GFLOP/s; back to back, "
            + (
                "each product in its fastest orientation)"
                if len(_floor_dtypes(p)) == 1
                else f"each product its fastest way in {p} or fp32)"
            ),
            f"update / floor, {p}:        {statistics.median(ratios):8.2f} x  (per round {_spread(ratios)})",
        ]
    for p in precisions:
        if p == "fp32" or "fp32" not in precisions:
            continue
        to_update = [u / f for u, f in zip(updates[p], updates["fp32"])]
        to_floor = [u / f for u, f in zip(updates[p], floors["fp32"])]
        # What no cast-free rewrite of the products can beat: the fp32 update's work outside its GEMMs
        # (its update minus its floor), which bf16 shares, plus the bf16 GEMMs back to back.
        bound = [(u - f + b) / u for u, f, b in zip(updates["fp32"], floors["fp32"], floors[p])]
        lines += [
            f"{p} update / fp32 update:  {statistics.median(to_update):8.2f} x  (per round {_spread(to_update)})",
            f"{p} update / fp32 floor:   {statistics.median(to_floor):8.2f} x  (per round {_spread(to_floor)})",
            f"{p} bound / fp32 update:   {statistics.median(bound):8.2f} x  ((fp32 update - fp32 floor + {p} floor) / "
            f"fp32 update: the {p} update with free casts; per round {_spread(bound)})",
        ]
    return lines


def _e2e_lines(names: Sequence[str], rounds: list[list[float]], steps: int, warmup: int) -> list[str]:
    lines = [
        f"end to end, Pendulum-v1, {steps} steps ({warmup} warm-up, then one update per step), "
        f"env steps/s, {len(rounds)} alternating rounds:",
        f"  {'round':>6s}" + "".join(f"{n:>20s}" for n in names),
    ]
    for k, r in enumerate(rounds):
        lines.append(f"  {k + 1:6d}" + "".join(f"{v:20.1f}" for v in r))
    medians = [statistics.median(r[i] for r in rounds) for i in range(len(names))]
    lines.append(f"  {'median':>6s}" + "".join(f"{m:20.1f}" for m in medians))
    if names[-1] == "Stable-Baselines3":
        for i, name in enumerate(names[:-1]):
            ratios = [r[i] / r[-1] for r in rounds]
            lines.append(f"  {name} / SB3 = {statistics.median(ratios):.2f} x  (per round {_spread(ratios)})")
    return lines


def update_block_rounds(updates: Sequence[Callable[[], None]], rounds: int, block: int) -> list[list[float]]:
    """Per round, the ms per update of each update runner (`update_runner`) over `block` consecutive
    calls, the runners taking turns block by block (`alternating_rounds`).

    Training runs updates back to back, an env step between them. The call-by-call rounds of
    `update_and_floor_rounds` run three other cases' products before every update, which slows the
    next update (a bf16 update relatively most) more than evicting the caches alone does
    (docs/measurements.md, bench.py)."""

    def block_of(update: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(block):
                update()

        return run

    blocks = [block_of(update) for update in updates]
    for run in blocks:
        run()
    return [[ms / block for ms in r] for r in alternating_rounds([_timed_ms(run) for run in blocks], rounds)]


def _block_lines(precisions: Sequence[str], rounds: list[list[float]], block: int) -> list[str]:
    """The in-blocks table: every round, the medians, and each precision's ratio to fp32 per round."""
    lines = [
        f"S=1, ms per update in blocks of {block} consecutive updates (as training runs them), "
        f"{len(rounds)} rounds (precisions taking turns block by block):",
        f"  {'round':>6s}" + "".join(f"{p + ' update':>13s}" for p in precisions),
    ]
    for k, r in enumerate(rounds):
        lines.append(f"  {k + 1:6d}" + "".join(f"{v:13.2f}" for v in r))
    lines.append(
        f"  {'median':>6s}"
        + "".join(f"{statistics.median(r[i] for r in rounds):13.2f}" for i in range(len(precisions)))
    )
    if "fp32" in precisions:
        base = precisions.index("fp32")
        for i, p in enumerate(precisions):
            if i != base:
                ratios = [r[i] / r[base] for r in rounds]
                lines.append(
                    f"  {p} / fp32 in blocks:      {statistics.median(ratios):8.2f} x  (per round {_spread(ratios)})"
                )
    return lines


def run_bench(
    device_name: str = "cpu",
    repeats: int = 100,
    e2e_steps: int = 3000,
    members: Sequence[int] = (1, 4, 8, 16),
    precisions: Sequence[str] = PRECISIONS,
    rounds: int = ROUNDS,
    e2e_rounds: int = E2E_ROUNDS,
) -> list[str]:
    """Measure and return the printed table's lines. `precisions`: values of `VariantSpec.precision`."""
    torch.set_num_threads(1)
    device = torch.device(device_name)
    specs = {p: dataclasses.replace(REFERENCE, precision=p) for p in precisions}
    spec = next(iter(specs.values()))
    info = env_info("Pendulum-v1")
    lines = [
        f"sacbench bench: reference on Pendulum-v1 dimensions (obs {info.obs_dim}, act {info.act_dim}), "
        f"hidden {'x'.join(map(str, spec.hidden_sizes))}, batch {spec.batch_size}, device {device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread, precisions {', '.join(precisions)}",
        f"cpu: {machine.cpu_info()[0]}, torch kernels {torch.backends.cpu.get_cpu_capability()}, native bf16 "
        f"({' or '.join(machine.NATIVE_BF16_FLAGS)}): {_yes_no(machine.native_bf16())}",
    ]
    gemms = update_gemms(info.obs_dim, info.act_dim, spec.hidden_sizes, spec.batch_size, 1)
    floors = [fastest_ways(gemms, device, dtypes=_floor_dtypes(p)) for p in precisions]
    updates = [update_runner(sp, 1, device) for sp in specs.values()]
    table = update_and_floor_rounds(updates, floors, repeats, rounds, device)
    lines += _update_lines(precisions, table, gemm_flops(gemms), len(gemms))
    block = max(2, repeats // rounds)
    lines += _block_lines(precisions, update_block_rounds(updates, rounds, block), block)
    # The same update on tiny networks: what an update costs whatever the width (Python, dispatch,
    # autograd, optimizer and elementwise-op overheads), the part a faster GEMM cannot remove.
    tiny = dataclasses.replace(REFERENCE, hidden_sizes=(16, 16))
    lines += [
        f"same update, 16x16 networks: {time_update(tiny, 1, repeats, device):8.2f} ms  (fp32; the cost that does not scale with width)",
        "member scaling (time per member-update; in brackets per update of all members; precisions taking turns):",
    ]
    for s in members:
        runs = [update_runner(sp, s, device) for sp in specs.values()]
        for run in runs:
            for _ in range(3):
                run()
        (times,) = alternating_rounds([_timed_ms(run) for run in runs], 1, max(10, repeats // s))
        cells = [f"{p} {ms / s:8.2f} ms ({ms:8.2f})" for p, ms in zip(precisions, times)]
        if len(times) > 1:
            cells.append(f"{precisions[1]} / {precisions[0]} {times[1] / times[0]:.2f} x")
        lines.append(f"  S={s:<4d} " + "   ".join(cells))
    # Alternating runs, as above: each round's ratios compare the runs under the same conditions.
    cases = [lambda sp=sp: env_steps_per_second(sp, e2e_steps, device) for sp in specs.values()]
    names = [f"sacbench {p}" for p in precisions]
    if sb3_installed():
        cases.append(lambda: sb3_steps_per_second(spec, e2e_steps, device_name))
        names.append("Stable-Baselines3")
    lines += _e2e_lines(names, alternating_rounds(cases, e2e_rounds), e2e_steps, spec.learning_starts)
    if not sb3_installed():
        lines.append('  Stable-Baselines3:   not installed (pip install -e ".[bench]")')
    return lines
