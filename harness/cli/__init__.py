"""`python -m harness`: run | ablate | list | check | bench | gpu-check | null-study | power-study | shape-study |
report | status | export.

One module per group of subcommands, each subcommand's parser built by its own `add_*` function beside
the handler it sets (`handle(args, argv) -> exit code`): `run` (training a grid), `check` (the regression
check), `report` (report, status, list: reading run records), `studies` (null-study, power-study, shape-study) and
`tools` (bench, gpu-check, export); `common` holds what they share.

Every usage error is one line on stderr and exit code 2; never a traceback. Building the parser imports
no torch, and neither do `report`, `status`, `list` or `check --results`: each handler imports the
training code it needs when it runs.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from ..records import WriteError
from ..running.errors import Interrupted, WorkerCrashed
from . import ablate, check, report, run, studies, tools
from .common import Parser, UsageError, apply_overrides, score_anchors, select_variants, user_variants
from .report import cmd_report
from .run import resolve_envs

__all__ = [
    "UsageError",
    "apply_overrides",
    "build_parser",
    "cmd_report",
    "main",
    "resolve_envs",
    "score_anchors",
    "select_variants",
    "user_variants",
]

# The subcommands in the order `--help` lists them.
SUBCOMMANDS = (
    run.add_run,
    ablate.add_ablate,
    report.add_list,
    check.add_check,
    tools.add_bench,
    tools.add_gpu_check,
    studies.add_null_study,
    studies.add_power_study,
    studies.add_shape_study,
    report.add_report,
    report.add_status,
    report.add_verdict_matrix,
    tools.add_export,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; each sets `args.handle`, the function that runs it."""
    parser = Parser(prog="python -m harness", description="sacbench: which SAC implementation details matter")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # A shell starts background jobs with SIGINT ignored; a grid must still stop cleanly on it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = build_parser().parse_args(argv)
        return args.handle(args, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        print(
            "interrupted: rerun the same command to go on (finished runs are kept; the lines above "
            "say where each stopped run resumes)",
            file=sys.stderr,
        )
        return 130
    except WorkerCrashed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except WriteError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 2
