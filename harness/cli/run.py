"""`harness run`: train a grid of variants x envs x seeds, then write runs.csv and the report.

The handler turns the command line into a `grid.GridRequest` (every check of the input first, so that bad
input costs nothing) and hands the grid to `harness.running.launch`; the training code is imported only
then, so that building the parser imports no torch.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import records
from ..live import DEFAULT_EVERY as LIVE_EVERY
from ..running.profiles import PROFILES
from .common import (
    UsageError,
    add_score_anchor_options,
    add_set_option,
    nonnegative_float,
    positive_float,
    positive_int,
    resolve_device,
    score_anchors,
    select_variants,
    user_variants,
)
from .report import cmd_report, report_dir

DEFAULT_SEEDS = 5

if TYPE_CHECKING:
    from ..live import LiveReport
    from ..running.envs import EnvRef
    from ..running.grid import GridRequest


def add_run(sub: argparse._SubParsersAction) -> None:
    """The `run` subcommand's parser."""
    run = sub.add_parser("run", help="train a grid of variants x envs x seeds")
    run.add_argument("--variants", required=True, help="comma-separated catalog (or --variants-file) names, or all")
    add_run_options(run)
    run.set_defaults(handle=cmd_run)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Every option of `run` but --variants: a command that trains its own set of variants through
    `cmd_run` (`ablate`) takes them all, an option added here included."""
    _add_grid_options(parser)
    _add_execution_options(parser)
    _add_reporting_options(parser)
    _add_sequential_options(parser)
    add_score_anchor_options(parser)


SEQUENTIAL_OPTIONS = {
    "--look-every": "look_every",
    "--max-seeds": "max_seeds",
    "--rule": "rule",
    "--futility": "futility",
}


def _add_sequential_options(run: argparse.ArgumentParser) -> None:
    """Seeds added look by look until the verdicts are reached (harness.sequential_grid, harness.cli.sequential)."""
    run.add_argument(
        "--until-decided",
        action="store_true",
        help="add seeds in looks of --look-every, seed-major, judging every comparison with the reference "
        "after each, until all are decided or --max-seeds is reached (docs/protocol.md); --seeds is not used",
    )
    run.add_argument(
        "--look-every", type=positive_int("--look-every"), default=None, metavar="K", help="seeds per look (default 5)"
    )
    run.add_argument(
        "--max-seeds",
        type=positive_int("--max-seeds"),
        default=None,
        metavar="N",
        help="the most seeds a comparison gets (default 30)",
    )
    run.add_argument(
        "--rule",
        default=None,
        help="the sequential rule: paired (default; per-seed differences, measured to hold 5%%) or adastop "
        "(the adastop package; measured above 5%% on the study's shapes, docs/statistics.md)",
    )
    run.add_argument(
        "--futility",
        type=float,
        default=None,
        metavar="P",
        help="after a look before the last, stop giving seeds to an open comparison whose predictive power "
        "(the chance that --max-seeds decides it if its differences go on as seen) is below P, such as 0.1; "
        "non-binding, so the error rate holds (docs/protocol.md). A rerun may change or drop it",
    )


def _add_grid_options(run: argparse.ArgumentParser) -> None:
    """What the grid trains beside its variants: their file, envs, seeds and budgets."""
    run.add_argument(
        "--variants-file",
        default=None,
        metavar="TOML",
        help="more variants: [[variant]] tables of name, description and spec fields (README)",
    )
    run.add_argument(
        "--envs",
        default="all",
        help="comma-separated gymnasium ids (any with Box observations and bounded Box actions) "
        "or module:Class / module:factory, or all (default: the benchmark's three)",
    )
    run.add_argument(
        "--env-kwargs",
        default=None,
        metavar="JSON",
        help="keyword arguments for making every env of --envs, a JSON object",
    )
    run.add_argument(
        "--seeds",
        type=positive_int("--seeds"),
        default=None,
        help=f"seeds 0..N-1 (default {DEFAULT_SEEDS}; with --until-decided the looks add seeds: see --max-seeds)",
    )
    run.add_argument(
        "--steps", type=positive_int("--steps"), default=None, help="env steps per run (default: the profile's)"
    )
    run.add_argument("--profile", default="quick", help=f"budget profile: {', '.join(PROFILES)} (default quick)")
    run.add_argument("--out", default="results/latest", help="results folder (default results/latest)")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    add_set_option(run, "override a spec field for every variant (repeatable)")


def _add_execution_options(run: argparse.ArgumentParser) -> None:
    """How the grid trains: workers, members, backend, and what to do with existing run folders."""
    run.add_argument(
        "--workers",
        type=positive_int("--workers"),
        default=os.cpu_count() or 1,
        help="parallel worker processes on CPU (default: number of cores)",
    )
    run.add_argument(
        "--members",
        type=positive_int("--members"),
        default=None,
        help="seeds trained together as members of one batched learner (default: 1 on CPU, all on CUDA)",
    )
    run.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray"),
        help="local worker processes (default) or Ray tasks (pip install -e .[ray])",
    )
    run.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray instance)")
    run.add_argument("--fresh", action="store_true", help="discard run folders of a different configuration")
    run.add_argument(
        "--repair", action="store_true", help="retrain runs whose records disagree (set aside under repaired/)"
    )
    run.add_argument("--strict", action="store_true", help="exit 1 if any run failed or diverged")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs still to train, in the order they would run, and train none",
    )


def _add_reporting_options(run: argparse.ArgumentParser) -> None:
    """What the grid writes beside its runs, and when it stops starting new ones."""
    run.add_argument("--no-report", action="store_true", help="do not build a report (neither live nor at the end)")
    run.add_argument(
        "--report-every",
        type=nonnegative_float("--report-every"),
        default=LIVE_EVERY,
        metavar="SECONDS",
        help=f"while the grid runs, rebuild reports/<name> after a run finishes, at most this often "
        f"(default {LIVE_EVERY:.0f}; 0: after every job)",
    )
    run.add_argument(
        "--stop-after",
        type=positive_float("--stop-after"),
        default=None,
        metavar="MINUTES",
        help="start no run that would not finish within MINUTES of the grid's start (expected from "
        "this folder's complete runs of the same variant, env and budget, else its failed ones, "
        "else the other variants' of that env and budget, same implementation and precision, "
        "else 15 ms a step; a run resumed from its checkpoint, the share of its budget left; "
        "estimated as each run is about to start, never below the time a seed of its kin's runs finished "
        "since the grid began; a job of several members that would end too late "
        "starts with the seeds that fit); the runs not started stay for a rerun (a cluster's walltime, "
        "a session's end)",
    )
    run.add_argument(
        "--eval-episodes",
        type=positive_int("--eval-episodes"),
        default=None,
        help="episodes per evaluation (default: the profile's)",
    )
    run.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write evaluation returns and diagnostics as TensorBoard scalars (extra tensorboard)",
    )


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Train the grid of `args` (see `add_run`); 0, or 1 with --strict when a run failed or diverged."""
    from ..running import grid, launch

    if args.until_decided:
        from .sequential import cmd_run_until_decided

        return cmd_run_until_decided(args, argv)
    given = [flag for flag, value in SEQUENTIAL_OPTIONS.items() if getattr(args, value) is not None]
    if given:
        raise UsageError(f"only --until-decided uses {', '.join(given)}: add it, or drop them")
    _require_backend(args)
    request, (targets, randoms) = grid_request(args, argv)
    workers = 1 if request.device == "cuda" else args.workers
    try:
        if args.dry_run:  # streamed: a huge grid's first lines come at once
            grid.dry_run(request, launch.grid_size(request), workers)
            return 0
        planned = grid.plan(request, fresh=args.fresh, repair=args.repair)
        grid.record_grid_identity(planned.jobs)
    except grid.ConfigConflict as exc:
        raise UsageError(str(exc)) from None
    for line in planned.inconsistent:
        print(f"inconsistent: {line}; not retrained (rerun with --repair)", flush=True)
    print(launch.plan_summary(request, planned, workers), flush=True)
    slow = grid.emulated_bf16_warning(planned.jobs, request.device)
    if slow:
        print(slow, flush=True)
    out = request.out
    live = None if args.backend == "ray" else live_report(args, out, targets, randoms)
    deadline = stop_deadline(args)
    launch.train(planned.jobs, out, workers, args.backend, args.address, on_finished=live, deadline=deadline)
    counts = launch.record(out, request.variants, request.envs)
    print(f"runs.csv in {out}")
    if not args.no_report:
        cmd_report(out, None, targets, randoms, pending=records.still_to_come(out))  # another grid's, if any
    bad = sum(v for k, v in counts.items() if k != "complete")
    return 1 if args.strict and bad else 0


def live_report(args: argparse.Namespace, out: Path, targets: dict, randoms: dict) -> LiveReport | None:
    """The report rebuilt as a grid's runs finish, or None with --no-report."""
    from ..live import LiveReport

    if args.no_report:
        return None
    return LiveReport(
        out,
        report_dir(out, None),
        args.report_every,
        targets,
        randoms,
        still_to_come=lambda: records.still_to_come(out),
    )


def stop_deadline(args: argparse.Namespace) -> float | None:
    """The wall-clock time (time.time()) after which --stop-after starts no run, or None."""
    return None if args.stop_after is None else time.time() + 60 * args.stop_after


def _require_backend(args: argparse.Namespace) -> None:
    """The optional packages `--backend ray` and `--tensorboard` need, and the options they rule out."""
    from ..running import ray_backend

    if args.backend == "ray" and args.stop_after is not None:
        raise UsageError("--stop-after works with the local backend only (a Ray cluster schedules the jobs itself)")
    if args.backend == "ray" and not ray_backend.ray_available():
        raise UsageError(ray_backend.INSTALL_HINT)
    if args.tensorboard:
        from ..running import tensorboard_log

        if not tensorboard_log.available():
            raise UsageError(tensorboard_log.INSTALL_HINT)


def grid_request(args: argparse.Namespace, argv: Sequence[str]) -> tuple[GridRequest, tuple[dict, dict]]:
    """The grid `run`'s arguments ask for, and its normalization anchors ({env label: target return},
    {env label: random return}); every bad input a one-line `UsageError` before anything is written."""
    from ..running import grid

    if args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; valid: {', '.join(PROFILES)}")
    overrides, variants = select_variants(args.variants, args.overrides, user_variants(args.variants_file))
    refs = resolve_envs(args.envs, args.env_kwargs)
    targets, randoms = score_anchors(args, refs)
    budgets = _budgets(args, refs, variants)
    device = resolve_device(args.device)
    out = Path(args.out)
    if args.dry_run and args.fresh:
        raise UsageError("--dry-run with --fresh: --fresh deletes run folders as it plans; drop one of them")
    problem = None if args.dry_run else grid.check_writable(out)
    if problem:
        raise UsageError(problem)
    request = grid.GridRequest(
        variants=variants,
        overrides=overrides,
        envs=list(refs),
        seeds=range(args.seeds or DEFAULT_SEEDS),
        budgets=budgets,
        out=out,
        device=device,
        members=args.members or ((args.seeds or DEFAULT_SEEDS) if device == "cuda" else 1),
        command=("python", "-m", "harness", *argv),
        env_refs=refs,
        tensorboard=args.tensorboard,
        normalization={
            e: {k: v for k, v in (("target", targets.get(e)), ("random", randoms.get(e))) if v is not None}
            for e in refs
            if e in targets or e in randoms
        },
    )
    return request, (targets, randoms)


def _budgets(args: argparse.Namespace, refs: dict[str, EnvRef], variants: dict) -> dict:
    """{env label: Budget} of the run; a budget in which some variant would make no update is a usage error."""
    from ..running.profiles import NoBudget, budget_for
    from ..running.train import no_update_reason

    try:
        # A registered id keeps its profile budget whatever its kwargs; other envs need --steps.
        budgets = {
            label: budget_for(args.profile, ref.entry, args.steps, args.eval_episodes) for label, ref in refs.items()
        }
    except NoBudget as exc:
        raise UsageError(str(exc)) from None
    for name, entry in variants.items():
        for env, budget in budgets.items():
            reason = no_update_reason(entry.spec, budget.total_steps)
            if reason:
                raise UsageError(f"{name} on {env}: {reason}: the run would make no gradient update")
    return budgets


def resolve_envs(text: str, kwargs_text: str | None) -> dict[str, EnvRef]:
    """`--envs` (ids, module:Class or all) and `--env-kwargs` as {label: EnvRef}. Each env is made once
    here, so one that cannot be made or trained (discrete or unbounded actions) is a usage error."""
    from ..running.envs import ENV_IDS, EnvError, EnvRef, env_info, parse_env_kwargs

    try:
        kwargs = parse_env_kwargs(kwargs_text)
        names = list(ENV_IDS) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
        if not names:
            raise EnvError(f"--envs {text!r}: no environment given")
        refs = [EnvRef.of(name, kwargs) for name in dict.fromkeys(names)]
        for ref in refs:
            env_info(ref)
    except EnvError as exc:
        raise UsageError(f"--envs: {exc}") from None
    return {ref.label: ref for ref in refs}
