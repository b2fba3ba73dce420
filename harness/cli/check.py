"""`harness check`: the learning-curve regression check against a committed baseline.

Comparing a results folder (`--results`) reads run records only and imports no torch; training the
check's runs (without `--results`) imports the training code in `_train_check_runs`.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import records
from ..judging.check import CHECK_ENV, DEFAULT_BASELINE, DEFAULT_TOLERANCE
from ..judging.check import DEFAULT_SEEDS as DEFAULT_CHECK_SEEDS
from ..judging.check import DEFAULT_VARIANTS as DEFAULT_CHECK_VARIANTS
from .common import (
    UsageError,
    add_set_option,
    nonnegative_float,
    nonnegative_int,
    positive_int,
    select_variants,
    user_variants,
)

if TYPE_CHECKING:
    from ..running.profiles import Budget


def add_check(sub: argparse._SubParsersAction) -> None:
    """The `check` subcommand's parser."""
    check = sub.add_parser("check", help="regression-check learning curves against a committed baseline")
    check.add_argument(
        "--baseline", default=str(DEFAULT_BASELINE), help=f"baseline folder (default {DEFAULT_BASELINE})"
    )
    check.add_argument(
        "--variants",
        default=",".join(DEFAULT_CHECK_VARIANTS),
        help=f"comma-separated variants (default {','.join(DEFAULT_CHECK_VARIANTS)})",
    )
    add_set_option(check, "override a spec field for every checked variant (repeatable)")
    check.add_argument(
        "--seeds",
        type=positive_int("--seeds"),
        default=DEFAULT_CHECK_SEEDS,
        help=f"seeds per variant (default {DEFAULT_CHECK_SEEDS})",
    )
    check.add_argument(
        "--seed-offset",
        type=nonnegative_int("--seed-offset"),
        default=None,
        help="first seed (default 0, the baseline's; with --results: all seeds there)",
    )
    check.add_argument(
        "--steps", type=positive_int("--steps"), default=None, help="env steps (default: the ci profile's)"
    )
    check.add_argument(
        "--tolerance",
        type=nonnegative_float("--tolerance"),
        default=DEFAULT_TOLERANCE,
        help=f"allowed drop below the baseline interval, in normalized score (default {DEFAULT_TOLERANCE})",
    )
    check.add_argument("--workers", type=positive_int("--workers"), default=os.cpu_count() or 1)
    check.add_argument("--out", default="results/check", help="where the check's runs go (default results/check)")
    check.add_argument(
        "--results",
        default=None,
        help="compare this results folder instead of training (its seeds --seed-offset.. if given)",
    )
    check.add_argument("--update-baseline", action="store_true", help="train and write the runs as the new baseline")
    check.add_argument("--variants-file", default=None, metavar="TOML", help="more variants (as for run)")
    check.add_argument(
        "--false-alarms",
        action="store_true",
        help="with --results (runs of unchanged code, seeds other than the baseline's): run the "
        "check on every disjoint --seeds-sized seed set and count the failures",
    )
    check.set_defaults(handle=cmd_check)


def cmd_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Train (or read `--results`) and compare with the baseline; 0 when the check passes, 1 when not."""
    from ..judging import check
    from ..running.profiles import budget_for

    # Runs already in --results are judged from their records: whether their implementation could train
    # in this Python (sb3-sac without Stable-Baselines3) is no question to ask, and asking imports it.
    overrides, variants = select_variants(
        args.variants, args.overrides, user_variants(args.variants_file), to_train=args.results is None
    )
    variant_names = list(variants)
    budget = budget_for("ci", CHECK_ENV, args.steps)
    baseline = Path(args.baseline)
    if args.false_alarms and (
        args.results is None or args.update_baseline or args.overrides or args.seed_offset is not None
    ):
        raise UsageError(
            "check --false-alarms: give --results DIR (and optionally --seeds, --tolerance), "
            "without --update-baseline, --set or --seed-offset"
        )
    if args.results is not None:
        new_dir = Path(args.results)
        problem = records.not_a_results_folder(new_dir)
        if problem:
            raise UsageError(f"check: results folder {new_dir} {problem}")
    else:
        new_dir = _train_check_runs(args, argv, variants, overrides, budget, baseline)
    if args.update_baseline:
        _write_baseline(args, variant_names, overrides, budget, new_dir, baseline)
        return 0
    if not (baseline / "runs").is_dir():
        raise UsageError(f"check: no baseline at {baseline}; make one with --update-baseline")
    if args.false_alarms:
        return _print_false_alarm_study(args, variant_names, baseline, new_dir)
    chosen = None
    if args.results is not None and args.seed_offset is not None:
        chosen = list(range(args.seed_offset, args.seed_offset + args.seeds))
    try:
        outcome = check.compare(baseline, new_dir, variant_names, args.tolerance, seeds=chosen)
    except ValueError as exc:
        raise UsageError(f"check: {exc}") from None
    for line in check.format_outcome(outcome, args.tolerance, overridden=bool(args.overrides)):
        print(line)
    return 0 if outcome.passed else 1


def _train_check_runs(
    args: argparse.Namespace, argv: Sequence[str], variants: dict, overrides: dict, budget: Budget, baseline: Path
) -> Path:
    """Train the check's runs (seeds --seed-offset.. of every variant on CHECK_ENV) into `--out`; returns it."""
    from ..running import grid

    new_dir = Path(args.out)
    problem = grid.check_writable(new_dir)
    if problem:
        raise UsageError(problem)
    if not args.update_baseline:
        _require_matching_baseline(baseline, budget)
    first = args.seed_offset or 0
    seeds = list(range(first, first + args.seeds))
    request = grid.GridRequest(
        variants=variants,
        overrides=overrides,
        envs=[CHECK_ENV],
        seeds=seeds,
        budgets={CHECK_ENV: budget},
        out=new_dir,
        device="cpu",
        members=1,
        command=("python", "-m", "harness", *argv),
    )
    jobs = grid.plan(request, fresh=True).jobs
    print(
        f"check: training {len(variants)} variants x {len(seeds)} seeds on {CHECK_ENV}, "
        f"{budget.total_steps} steps each, {args.workers} workers",
        flush=True,
    )
    grid.execute(jobs, args.workers)
    return new_dir


def _write_baseline(
    args: argparse.Namespace, variant_names: list[str], overrides: dict, budget: Budget, runs: Path, baseline: Path
) -> None:
    """Write the runs of `runs` as the new baseline, with its provenance in baseline.json; complete runs only."""
    from ..judging import check

    failed = check.unfinished_runs(runs, variant_names)
    if failed:
        raise UsageError(f"check --update-baseline: a baseline holds complete runs only; {failed}")
    check.write_baseline(
        runs,
        baseline,
        variant_names,
        {
            "variants": variant_names,
            "seeds": args.seeds,
            "seed_offset": args.seed_offset or 0,
            "overrides": overrides,
            "env": CHECK_ENV,
            "budget": budget.to_dict(),
        },
    )
    print(f"check: baseline written to {baseline}")


def _print_false_alarm_study(args: argparse.Namespace, variant_names: list[str], baseline: Path, results: Path) -> int:
    """`check --false-alarms`: the check on every disjoint --seeds-sized seed set of `results`, printed."""
    from ..judging import check

    try:
        study = check.false_alarm_study(baseline, results, variant_names, args.seeds, args.tolerance)
    except ValueError as exc:
        raise UsageError(f"check: {exc}") from None
    print(f"false-alarm study: {results} against {baseline}, {', '.join(variant_names)}, tolerance {args.tolerance}")
    for line in check.format_false_alarm_study(study):
        print(line)
    return 0


def _require_matching_baseline(baseline: Path, budget: Budget) -> None:
    """A usage error unless `baseline` exists and was made with `budget`'s steps and eval episodes."""
    meta_path = baseline / "baseline.json"
    if not meta_path.exists():
        raise UsageError(f"check: no baseline at {baseline}; make one with --update-baseline")
    try:
        made_with = json.loads(meta_path.read_text()).get("budget", {})
    except ValueError:
        raise UsageError(f"check: {meta_path} is not valid JSON") from None
    if made_with.get("total_steps") != budget.total_steps or made_with.get("eval_episodes") != budget.eval_episodes:
        raise UsageError(
            f"check: the baseline was made with {made_with.get('total_steps')} steps and "
            f"{made_with.get('eval_episodes')} eval episodes, this check would use "
            f"{budget.total_steps} and {budget.eval_episodes}; pass the same --steps or update the baseline"
        )
