"""`harness run --until-decided`: the command line's hand-off to harness.sequential_grid.

The grid is the one `run` would train (`grid_request`), its seeds added look by look instead of
`--seeds`; after the last look, runs.csv, the state table, where each comparison stands, and the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import records
from .common import UsageError
from .report import cmd_report
from .run import grid_request, live_report, stop_deadline

if TYPE_CHECKING:
    from ..running.grid import GridRequest


def cmd_run_until_decided(
    args: argparse.Namespace,
    argv: Sequence[str],
    copy_from: Path | None = None,
    copied: Sequence[str] = (),
    compared: Sequence[tuple[str, str]] | None = None,
    reference: str | None = None,
) -> int:
    """Train and judge the grid of `args` look by look (docs/protocol.md, Sequential grids); 0, or 1
    with --strict when a run failed or diverged. `copy_from`: a results folder whose finished runs of
    the variants `copied` (same configuration, `grid.plan` checks it) are copied into --out before the
    first look instead of trained (`harness ablate --ends-from`). `compared`: the comparisons, (variant,
    compared with) pairs, where not every variant against the reference (`harness ablate`'s rows).
    `reference`: the variant the looks' design names as reference (`harness ablate --reference`), the
    report's by default."""
    from .. import sequential_grid
    from ..judging import looks, sequential
    from ..judging.stats import REFERENCE_NAME

    reference = reference or REFERENCE_NAME
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
        design = sequential_grid.design_from(args.rule, args.look_every, args.max_seeds, args.futility)
        caution = sequential.LEVEL_CAUTIONS.get(design.rule)
        if caution:
            print(f"warning: {caution}", file=sys.stderr)
        request, (targets, randoms) = grid_request(args, argv)
        cuda = request.device == "cuda"
        request = dataclasses.replace(request, members=args.members or (design.look_every if cuda else 1))
        sequential_grid.check_request(request, design, reference, compared)
        found = _copies(copy_from, Path(request.out), request.envs, copied, design.max_seeds)
        if found:
            _check_same_configuration(copy_from, request, copied, design.max_seeds)
        if args.dry_run:
            if found:
                print(f"would copy {_copy_summary(found)} from {copy_from}, not train them")
            workers = 1 if cuda else args.workers
            print(sequential_grid.dry_run_text(request, design, reference, found, compared, workers))
            return 0
        out = request.out
        done = [run for run in found if records.copy_run(copy_from, out, *run)]
        if done:
            print(f"copied {_copy_summary(done)} from {copy_from}")
        live = live_report(args, out, targets, randoms)
        deadline = stop_deadline(args)
        state = sequential_grid.run_until_decided(
            request,
            design,
            reference,
            1 if cuda else args.workers,
            deadline=deadline,
            on_finished=live,
            compared=compared,
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


def _copies(
    source: Path | None, out: Path, envs: Sequence[str], variants: Sequence[str], max_seeds: int
) -> list[tuple[str, str, int]]:
    """(env, variant, seed) of each finished run of `variants` on `envs` in `source`, seed below
    `max_seeds`, that `out` has no folder for: the runs `cmd_run_until_decided` copies, not trains."""
    if source is None:
        return []
    order = {variant: i for i, variant in enumerate(variants)}
    found = [
        (env, variant, seed)
        for path, env, variant, seed in records.run_folders(source)
        if env in envs
        and variant in variants
        and seed < max_seeds
        and records.run_state(path) is not None
        and not records.run_dir(out, env, variant, seed).exists()
    ]
    return sorted(found, key=lambda run: (run[0], order[run[1]], run[2]))


def _check_same_configuration(source: Path, request: GridRequest, variants: Sequence[str], max_seeds: int) -> None:
    """Raise UsageError unless `source`'s runs of `variants` were trained with the configuration
    `request` would train them with (spec, env, budget: `grid.plan`'s check, read-only)."""
    from ..running import grid

    part = dataclasses.replace(
        request, out=str(source), variants={v: request.variants[v] for v in variants}, seeds=list(range(max_seeds))
    )
    try:
        grid.plan(part)
    except grid.ConfigConflict as exc:
        problem = str(exc).split("; ")[0]
        raise UsageError(
            f"--ends-from: {problem}; give the grid that folder's budget (--steps, --profile), or drop --ends-from"
        ) from None


def _copy_summary(runs: Sequence[tuple[str, str, int]]) -> str:
    """'20 finished runs (LunarLanderContinuous-v3: reference seeds 0-9, blog-sac2 seeds 0-9)'."""
    by: dict[str, dict[str, list[int]]] = {}
    for env, variant, seed in runs:
        by.setdefault(env, {}).setdefault(variant, []).append(seed)
    parts = [
        f"{env}: " + ", ".join(f"{variant} seeds {_ranges(seeds)}" for variant, seeds in variants.items())
        for env, variants in by.items()
    ]
    return f"{len(runs)} finished run{'s' if len(runs) != 1 else ''} ({'; '.join(parts)})"


def _ranges(seeds: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    spans: list[list[int]] = []
    for seed in seeds:
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
