"""`python -m harness gpu-check --out DIR`: GPU readiness in one command, under 8 minutes.

On a machine with CUDA it runs these steps in order, each under its own time limit and all within
`BUDGET_S`, and writes every figure to DIR/gpu_check.txt, rewritten (atomically) after each step so
that a step that hangs or crashes leaves the earlier ones on disk:

- environment: torch, CUDA and the GPU;
- tests: the CUDA tests (`pytest -m cuda`);
- independence: S members of one learner against each seed trained alone, in both precisions, at full
  width: how many members are bit-identical, and the largest relative difference;
- bench: `python -m harness bench` on the device at S = 1, 8, 64, 256 members, both precisions;
- grid: a short grid, reference and bf16 on Pendulum-v1 (the ci profile), each variant's seeds as the
  members of one learner; its runs go to DIR/grid.

Exit code 0 when every step passed, 1 when one failed, 2 on bad input (such as no CUDA device).
`--device cpu --sizes smoke` runs the same steps on the CPU at tiny sizes: a test of this command, not
figures of a GPU.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from variants import REFERENCE
from variants.buffer import ReplayBuffer
from variants.learner import SACLearner

from .. import machine, records

ROOT = Path(__file__).resolve().parents[2]  # the repository: `python -m harness` and `pytest tests` run from here
BUDGET_S = 450.0  # all steps together; the machine's start and the interpreter's come on top
REPORT = "gpu_check.txt"
# On a GPU a batched learner and a learner alone may pick different product kernels (another summation
# order), so members are compared within a tolerance there: fp32's is loose against float32 rounding
# through 30 Adam updates; bf16's is its unit roundoff, 2**-8, since one order or the other can round a
# bf16 product one unit apart (the differences seen on a GPU: docs/measurements.md, gpu_check.py). That a member's
# records do not depend on the other members' data is checked bit for bit on the GPU by the CUDA tests.
MEMBER_TOLERANCE = {"fp32": 1e-4, "bf16": 2.0**-8}


@dataclass(frozen=True)
class Sizes:
    """What each step runs."""

    bench_members: tuple[int, ...]
    bench_repeats: int
    bench_steps: int  # end-to-end env steps; the first 1,000 are the warm-up
    independence_members: int
    independence_updates: int
    independence_hidden: tuple[int, ...]
    grid_seeds: int
    grid_profile: str
    limits_s: dict[str, float]  # per step


SIZES: dict[str, Sizes] = {
    # The bench's member scaling at S = 256 and the grid's 4,000 updates of 8 members are the long steps;
    # the limits leave each one room and sum to under BUDGET_S (docs/measurements.md, gpu_check.py).
    "gpu": Sizes(
        (1, 8, 64, 256),
        50,
        2000,
        8,
        30,
        (256, 256),
        8,
        "ci",
        {"environment": 30, "tests": 90, "independence": 60, "bench": 180, "grid": 150},
    ),
    "smoke": Sizes(
        (1, 2),
        2,
        1010,
        3,
        3,
        (32, 32),
        2,
        "smoke",
        {"environment": 30, "tests": 120, "independence": 60, "bench": 120, "grid": 120},
    ),
}


@dataclass
class Context:
    out: Path
    device: str
    sizes: Sizes
    deadline: float  # time.monotonic() by which every step must be done

    def limit(self, step: str) -> float:
        return max(1.0, min(self.sizes.limits_s[step], self.deadline - time.monotonic()))


@dataclass
class StepResult:
    ok: bool
    lines: list[str]


def _command(ctx: Context, step: str, argv: Sequence[str], keep_lines: int | None = None) -> StepResult:
    """Run `python argv...` from the repository root under the step's time limit. The command gets its
    own process group, so that at the limit its worker processes are stopped with it."""
    limit = ctx.limit(step)
    start = time.monotonic()
    shown = "python " + " ".join(argv)
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=limit)
        status = f"exit {proc.returncode}, {time.monotonic() - start:.1f} s"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        status = f"timed out after {limit:.0f} s (stopped)"
    lines = output.splitlines()
    if keep_lines is not None:
        lines = lines[-keep_lines:]
    return StepResult(proc.returncode == 0, [f"$ {shown}", status, *lines])


def step_environment(ctx: Context) -> StepResult:
    lines = [
        f"torch {torch.__version__}, python {platform.python_version()}, {platform.platform()}, {os.cpu_count()} CPUs"
    ]
    if ctx.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        lines += [
            f"cuda {torch.version.cuda}, {torch.cuda.device_count()} device(s); device 0: {props.name}, "
            f"{props.total_memory / 2**30:.0f} GiB, compute capability {props.major}.{props.minor}",
            f"bf16 supported: {torch.cuda.is_bf16_supported()}, TF32 matmul allowed: "
            f"{torch.backends.cuda.matmul.allow_tf32} (float32 products stay float32 unless it is)",
        ]
    return StepResult(True, lines)


def step_tests(ctx: Context) -> StepResult:
    # Every test marked cuda; on the CPU they are all skipped, which still exercises the collection.
    return _command(ctx, "tests", ["-m", "pytest", "-q", "-p", "no:xdist", "-m", "cuda", "-rs", "tests"], keep_lines=25)


def _buffer(members: int, obs_dim: int, act_dim: int, device: str, n: int = 1000) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(members, n, obs_dim, act_dim, device)
    for _ in range(n):
        buf.add(
            rng.normal(size=(members, obs_dim)),
            rng.uniform(-1, 1, (members, act_dim)),
            rng.normal(size=members),
            rng.normal(size=(members, obs_dim)),
            rng.random(members) < 0.05,
        )
    return buf


def member_differences(
    precision: str, members: int, updates: int, hidden: Sequence[int], device: str
) -> tuple[int, float]:
    """Train `members` seeds as one learner and each alone on the same data (Pendulum's dimensions);
    returns (how many members equal their seed alone bit for bit, the largest relative difference of a
    member's parameter tensor from its seed alone's, in the Euclidean norm)."""
    spec = dataclasses.replace(REFERENCE, precision=precision, hidden_sizes=tuple(hidden))
    obs_dim, act_dim, scale = 3, 1, np.array([2.0], dtype=np.float32)
    seeds = list(range(members))
    batched, buf = SACLearner(spec, obs_dim, act_dim, scale, seeds, device), _buffer(members, obs_dim, act_dim, device)
    alone = [SACLearner(spec, obs_dim, act_dim, scale, [s], device) for s in seeds]
    own = []
    for m in seeds:
        b = ReplayBuffer(1, buf.capacity, obs_dim, act_dim, device)
        b.load_state_dict(
            {name: getattr(buf, name)[m : m + 1, : buf.size] for name in buf.FIELDS}
            | {"pos": buf.pos, "size": buf.size}
        )
        own.append(b)
    for _ in range(updates):
        batched.update(buf.sample(spec.batch_size, batched.generators))
        for learner, b in zip(alone, own):
            learner.update(b.sample(spec.batch_size, learner.generators))

    def tensors(learner: SACLearner) -> list[torch.Tensor]:
        return [
            t.detach().cpu()
            for t in (*learner.actor, *learner.critic, *learner.critic_target, learner.log_alpha.unsqueeze(1))
        ]

    identical, worst = 0, 0.0
    stacked = tensors(batched)
    for m, learner in enumerate(alone):
        same = True
        for whole, single in zip(stacked, tensors(learner)):
            k = whole.shape[0] // members
            part = whole[m * k : (m + 1) * k]
            same &= torch.equal(part, single)
            worst = max(worst, ((part - single).norm() / single.norm()).item())
        identical += same
    return identical, worst


def step_independence(ctx: Context) -> StepResult:
    s = ctx.sizes
    lines = [
        f"{s.independence_members} members vs each seed alone, {s.independence_updates} updates, hidden "
        f"{'x'.join(map(str, s.independence_hidden))}, batch {REFERENCE.batch_size}:"
    ]
    ok = True
    for precision in ("fp32", "bf16"):
        start = time.monotonic()
        identical, worst = member_differences(
            precision, s.independence_members, s.independence_updates, s.independence_hidden, ctx.device
        )
        lines.append(
            f"  {precision}: {identical} of {s.independence_members} members bit-identical to their seed alone; "
            f"largest relative difference {worst:.2e}, tolerance {MEMBER_TOLERANCE[precision]:.1e} "
            f"({time.monotonic() - start:.1f} s)"
        )
        # Bit-identity is the CPU's guarantee; on a GPU it is reported, and closeness is required.
        ok &= worst < MEMBER_TOLERANCE[precision] and (ctx.device != "cpu" or identical == s.independence_members)
    return StepResult(ok, lines)


def step_bench(ctx: Context) -> StepResult:
    s = ctx.sizes
    return _command(
        ctx,
        "bench",
        [
            "-m",
            "harness",
            "bench",
            "--device",
            ctx.device,
            "--members",
            ",".join(map(str, s.bench_members)),
            "--repeats",
            str(s.bench_repeats),
            "--steps",
            str(s.bench_steps),
        ],
    )


def step_grid(ctx: Context) -> StepResult:
    s = ctx.sizes
    out = ctx.out / "grid"
    result = _command(
        ctx,
        "grid",
        [
            "-m",
            "harness",
            "run",
            "--variants",
            "reference,bf16",
            "--envs",
            "Pendulum-v1",
            "--seeds",
            str(s.grid_seeds),
            "--profile",
            s.grid_profile,
            "--device",
            ctx.device,
            "--members",
            str(s.grid_seeds),
            "--out",
            str(out),
            "--fresh",
            "--no-report",
        ],
        keep_lines=6,
    )
    runs = out / "runs.csv"
    if not runs.exists():
        return StepResult(False, [*result.lines, f"no {runs}"])
    with runs.open() as fh:
        rows = list(csv.DictReader(fh))
    for variant in ("reference", "bf16"):
        mine = [r for r in rows if r["variant"] == variant]
        complete = [float(r["final_return"]) for r in mine if r["state"] == "complete"]
        wall = [float(r["wall_s"]) for r in mine if r.get("wall_s")]
        result.lines.append(
            f"  {variant}: {len(complete)} of {len(mine)} runs complete; final_return median "
            f"{statistics.median(complete) if complete else float('nan'):.1f}; wall {max(wall, default=0):.0f} s"
        )
        result.ok &= len(complete) == s.grid_seeds
    return result


STEPS: dict[str, Callable[[Context], StepResult]] = {
    "environment": step_environment,
    "tests": step_tests,
    "independence": step_independence,
    "bench": step_bench,
    "grid": step_grid,
}


def run_gpu_check(out: Path, device: str, sizes: str, steps: Sequence[str], echo: Callable[[str], None] = print) -> int:
    """Run `steps` (names in STEPS, in STEPS's order) and write out/gpu_check.txt; 0 if all passed, else 1."""
    ctx = Context(Path(out), device, SIZES[sizes], time.monotonic() + BUDGET_S)
    report = [
        f"sacbench gpu-check on {device} ({sizes} sizes), git {machine.git_commit()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}"
    ]
    echo(report[0])
    failed = []
    for name, step in STEPS.items():
        if name not in steps:
            continue
        start = time.monotonic()
        if start >= ctx.deadline:
            result = StepResult(False, [f"not run: the {BUDGET_S:.0f} s budget was spent"])
        else:
            try:
                result = step(ctx)
            except Exception as exc:  # a broken step is recorded, and the others still run
                result = StepResult(False, [f"raised {type(exc).__name__}: {exc}"])
        header = f"== {name}: {'ok' if result.ok else 'FAILED'} ({time.monotonic() - start:.1f} s)"
        report += [header, *result.lines]
        echo("\n".join([header, *result.lines]))
        if not result.ok:
            failed.append(name)
        records.atomic_write_text(ctx.out / REPORT, "\n".join(report) + "\n")
    summary = f"== {'all steps passed' if not failed else 'failed: ' + ', '.join(failed)}"
    report.append(summary)
    echo(summary)
    records.atomic_write_text(ctx.out / REPORT, "\n".join(report) + "\n")
    return 1 if failed else 0
