"""`harness run --until-decided`: the command line's hand-off to harness.sequential_grid.

The grid is the one `run` would train (`grid_request`), its seeds added look by look instead of
`--seeds`; after the last look, runs.csv, the state table, where each comparison stands, and the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from .. import records
from .common import UsageError
from .report import cmd_report
from .run import grid_request, live_report, stop_deadline


def cmd_run_until_decided(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Train and judge the grid of `args` look by look (docs/protocol.md, Sequential grids); 0, or 1
    with --strict when a run failed or diverged."""
    from .. import sequential_grid
    from ..judging import looks, sequential
    from ..judging.stats import REFERENCE_NAME
    from ..running import grid, launch

    if args.backend != "local":
        raise UsageError("--until-decided works with the local backend only (each look waits for its runs)")
    if args.seeds is not None:
        raise UsageError("--until-decided with --seeds: the looks choose the seeds; cap them with --max-seeds")
    if args.fresh:
        raise UsageError(
            "--until-decided with --fresh: the looks already judged stand on their runs; use another --out"
        )
    try:
        design = sequential_grid.design_from(args.rule, args.look_every, args.max_seeds)
        caution = sequential.LEVEL_CAUTIONS.get(design.rule)
        if caution:
            print(f"warning: {caution}", file=sys.stderr)
        request, (targets, randoms) = grid_request(args, argv)
        cuda = request.device == "cuda"
        request = dataclasses.replace(request, members=args.members or (design.look_every if cuda else 1))
        sequential_grid.check_request(request, design, REFERENCE_NAME)
        if args.dry_run:
            print(sequential_grid.dry_run_text(request, design, REFERENCE_NAME))
            return 0
        out = request.out
        live = live_report(args, out, targets, randoms)
        deadline = stop_deadline(args)
        state = sequential_grid.run_until_decided(
            request, design, REFERENCE_NAME, 1 if cuda else args.workers, deadline=deadline, on_finished=live
        )
    except (sequential_grid.SequentialGridError, grid.ConfigConflict) as exc:
        raise UsageError(str(exc)) from None
    counts = launch.record(out, request.variants, request.envs)
    print(f"runs.csv and looks.json in {out}")
    for line in looks.summary_lines(state):
        print(line)
    if not args.no_report:
        cmd_report(out, None, targets, randoms, pending=records.still_to_come(out))
    bad = sum(v for k, v in counts.items() if k != "complete")
    return 1 if args.strict and bad else 0
