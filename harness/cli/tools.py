"""The subcommands around training: `bench` (update and env-step timings), `gpu-check` (GPU readiness) and
`export` (final policies as ONNX or TorchScript). Each handler imports torch itself, when it runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .common import UsageError, positive_int, resolve_device, split_names


def add_bench(sub: argparse._SubParsersAction) -> None:
    """The `bench` subcommand's parser."""
    bench = sub.add_parser("bench", help="update time vs the FLOP floor, member scaling, env steps/s vs SB3")
    bench.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    bench.add_argument("--repeats", type=positive_int("--repeats"), default=100, help="timed updates per case")
    bench.add_argument("--steps", type=positive_int("--steps"), default=3000, help="env steps of the end-to-end case")
    bench.add_argument("--members", default="1,4,8,16", help="member counts to time (default 1,4,8,16)")
    bench.add_argument(
        "--precisions", default="fp32,bf16", help="spec precisions to time side by side (default fp32,bf16)"
    )
    bench.set_defaults(handle=cmd_bench)


def cmd_bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Print the benchmark's figures line by line."""
    from variants.networks import PRECISIONS

    from ..running.bench import run_bench

    try:
        members = [int(m) for m in args.members.split(",")]
    except ValueError:
        raise UsageError(f"--members {args.members!r}: expected comma-separated whole numbers") from None
    if not members or min(members) < 1:
        raise UsageError("--members: each count must be >= 1")
    precisions = split_names(args.precisions, list(PRECISIONS), "precision")
    device = resolve_device(args.device)
    for line in run_bench(device, args.repeats, args.steps, members, precisions):
        print(line, flush=True)
    return 0


def add_gpu_check(sub: argparse._SubParsersAction) -> None:
    """The `gpu-check` subcommand's parser."""
    gpu = sub.add_parser(
        "gpu-check",
        help="GPU readiness: CUDA tests, member independence, bench and a short grid, "
        "figures to OUT/gpu_check.txt (under 8 minutes)",
    )
    gpu.add_argument("--out", required=True, help="folder for gpu_check.txt and the grid's runs")
    gpu.add_argument(
        "--device",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cuda (default); cpu runs the same steps on the CPU, with --sizes smoke a test of this command",
    )
    gpu.add_argument("--sizes", default="gpu", choices=("gpu", "smoke"), help="gpu (default) or smoke: tiny sizes")
    gpu.add_argument(
        "--only",
        default="all",
        help="comma-separated steps (default all): environment, tests, independence, bench, grid",
    )
    gpu.set_defaults(handle=cmd_gpu_check)


def cmd_gpu_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the chosen GPU-readiness steps; their exit code."""
    from ..running import grid
    from ..running.gpu_check import STEPS, run_gpu_check

    steps = split_names(args.only, list(STEPS), "step")
    resolve_device(args.device)  # no CUDA device: one line and exit 2 before anything runs
    problem = grid.check_writable(Path(args.out))
    if problem:
        raise UsageError(problem)
    return run_gpu_check(Path(args.out), args.device, args.sizes, steps)


def add_export(sub: argparse._SubParsersAction) -> None:
    """The `export` subcommand's parser."""
    export = sub.add_parser("export", help="write each run's final policy as ONNX or TorchScript, and check it")
    export.add_argument("results", help="results folder, e.g. results/latest")
    export.add_argument("--format", default="onnx", choices=("onnx", "torchscript"), help="default onnx")
    export.set_defaults(handle=cmd_export)


def cmd_export(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Export every run's final policy of `args.results`."""
    from ..running.export import ExportError, export_command

    try:
        return export_command(Path(args.results), args.format)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
