"""`python -m harness`: run | list | report.

Every usage error is one line on stderr and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from variants.catalog import CATALOG, REFERENCE, CatalogEntry, distinct_variants
from variants.networks import PRECISIONS
from variants.spec import parse_override, with_overrides
from variants.userfile import VariantFileError, load_variants_file

from . import records
from .judging import normalization
from .judging.check import DEFAULT_BASELINE, DEFAULT_TOLERANCE
from .judging.check import DEFAULT_SEEDS as DEFAULT_CHECK_SEEDS
from .judging.check import DEFAULT_VARIANTS as DEFAULT_CHECK_VARIANTS
from .live import DEFAULT_EVERY as LIVE_EVERY
from .live import LiveReport
from .records import WriteError
from .running import grid
from .running.envs import ENV_IDS, EnvError, EnvRef, env_info, parse_env_kwargs
from .running.implementations import TRAINERS
from .running.profiles import PROFILES, NoBudget, budget_for
from .running.train import Interrupted, no_update_reason


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        raise UsageError(f"{self.prog}: {message}")


def _split_names(text: str, valid: Sequence[str], kind: str) -> list[str]:
    if text.strip() == "all":
        return list(valid)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise UsageError(f"unknown {kind} {', '.join(unknown) or repr(text)}; valid: all, {', '.join(valid)}")
    return list(dict.fromkeys(names))


def _variant_names(text: str) -> list[str]:
    """A report's --variants: names as run records spell them (a variants file's too), checked against
    the records, not the catalog."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"--variants needs at least one name, got {text!r}")
    return names


def _number(name: str, convert, kind: str, valid, requirement: str):
    """An argparse type: `convert(text)`, refused with a one-line message unless `valid(value)`."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {kind}, got {text!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"{name} must be {requirement}, got {text!r}")
        return value

    return parse


def _positive_int(name: str):
    return _number(name, int, "a whole number", lambda v: v >= 1, ">= 1")


def _positive_float(name: str):
    return _number(name, float, "a number", lambda v: v > 0, "> 0")


def _nonnegative_float(name: str):
    return _number(name, float, "a number", lambda v: v >= 0, ">= 0")


def _finite_float(name: str):
    return _number(name, float, "a number", math.isfinite, "finite")


def _resolve_device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: no CUDA device is visible to torch (install a CUDA build of torch; see README)"
        )
    return choice


def apply_overrides(
    assignments: Sequence[str], variants: dict[str, CatalogEntry]
) -> tuple[dict, dict[str, CatalogEntry]]:
    """Parse `--set KEY=VALUE` items and apply them to every chosen variant."""
    overrides = {}
    for item in assignments:
        try:
            key, value = parse_override(item)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        overrides[key] = value
    out = {}
    for name, entry in variants.items():
        try:
            out[name] = dataclasses.replace(entry, spec=with_overrides(entry.spec, overrides))
        except ValueError as exc:
            raise UsageError(f"--set: {exc}") from None
    return overrides, out


def user_variants(path: str | None) -> dict[str, CatalogEntry]:
    """The variants of `--variants-file` ({} without one); a bad file is a usage error."""
    if path is None:
        return {}
    try:
        return load_variants_file(path)
    except VariantFileError as exc:
        raise UsageError(f"--variants-file {exc}") from None


def resolve_envs(text: str, kwargs_text: str | None) -> dict[str, EnvRef]:
    """`--envs` (ids, module:Class or all) and `--env-kwargs` as {label: EnvRef}. Each env is made once
    here, so one that cannot be made or trained (discrete or unbounded actions) is a usage error."""
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


def reference_returns(args: argparse.Namespace, refs: dict[str, EnvRef] | None = None) -> tuple[dict, dict]:
    """`--target` and `--random` as ({env label: return}, {env label: return}). With `refs` (a run) each
    ENV must be one of the run's envs, given as its id, its module:Class or its label."""
    try:
        targets = normalization.parse_reference_returns(args.target, "--target")
        randoms = normalization.parse_reference_returns(args.random, "--random")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if refs is not None:
        names = {**{ref.entry: label for label, ref in refs.items()}, **{label: label for label in refs}}
        unknown = sorted((set(targets) | set(randoms)) - set(names))
        if unknown:
            raise UsageError(f"--target/--random: {', '.join(unknown)} is not among --envs ({', '.join(names)})")
        targets = {names[k]: v for k, v in targets.items()}
        randoms = {names[k]: v for k, v in randoms.items()}
    try:
        normalization.check_distinct(targets, randoms)
    except ValueError as exc:
        raise UsageError(f"--target/--random: {exc}") from None
    return targets, randoms


def select_variants(
    text: str, assignments: Sequence[str], user: dict[str, CatalogEntry] | None = None
) -> tuple[dict, dict[str, CatalogEntry]]:
    """`--variants` and `--set` resolved to catalog entries that can train here.

    `all` means every distinct entry (`distinct_variants`: none whose arithmetic another computes) that
    can run in this Python with these overrides; one that cannot (a peer library not installed, or a
    spec it cannot realize) is left out with a note on stderr. Named explicitly, it is a usage error.
    """
    catalog = {**CATALOG, **(user or {})}  # a --variants-file's entries join the catalog's names
    everything = text.strip() == "all"
    names = [*distinct_variants(), *(user or {})] if everything else _split_names(text, list(catalog), "variant")
    overrides, variants = apply_overrides(assignments, {n: catalog[n] for n in names})
    for name, entry in list(variants.items()):
        trainer = TRAINERS[entry.implementation]
        missing = trainer.missing()
        reason = missing or "; ".join(trainer.problems(entry.spec))
        if reason and everything:
            print(f"note: --variants all leaves out {name}: {reason}", file=sys.stderr)
            del variants[name]
        elif reason:
            raise UsageError(f"--variants {name}: {missing or 'its implementation cannot train this spec: ' + reason}")
    return overrides, variants


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness", description="sacbench: which SAC implementation details matter")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="train a grid of variants x envs x seeds")
    run.add_argument("--variants", required=True, help="comma-separated catalog (or --variants-file) names, or all")
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
    run.add_argument("--seeds", type=_positive_int("--seeds"), default=5, help="seeds 0..N-1 (default 5)")
    run.add_argument(
        "--steps", type=_positive_int("--steps"), default=None, help="env steps per run (default: the profile's)"
    )
    run.add_argument("--profile", default="quick", help=f"budget profile: {', '.join(PROFILES)} (default quick)")
    run.add_argument("--out", default="results/latest", help="results folder (default results/latest)")
    run.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field for every variant (repeatable)",
    )
    run.add_argument(
        "--workers",
        type=_positive_int("--workers"),
        default=os.cpu_count() or 1,
        help="parallel worker processes on CPU (default: number of cores)",
    )
    run.add_argument(
        "--members",
        type=_positive_int("--members"),
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
    run.add_argument("--strict", action="store_true", help="exit 1 if any run failed or diverged")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs still to train, in the order they would run, and train none",
    )
    run.add_argument("--no-report", action="store_true", help="do not build a report (neither live nor at the end)")
    run.add_argument(
        "--report-every",
        type=_nonnegative_float("--report-every"),
        default=LIVE_EVERY,
        metavar="SECONDS",
        help=f"while the grid runs, rebuild reports/<name> after a run finishes, at most this often "
        f"(default {LIVE_EVERY:.0f}; 0: after every job)",
    )
    run.add_argument(
        "--stop-after",
        type=_positive_float("--stop-after"),
        default=None,
        metavar="MINUTES",
        help="start no run that would not finish within MINUTES of the grid's start (expected from "
        "this folder's complete runs of the same variant, env and budget, else its failed ones, "
        "else 15 ms a step; estimated as each run is about to start); the runs "
        "not started stay for a rerun (a cluster's walltime, a session's end)",
    )
    run.add_argument(
        "--eval-episodes",
        type=_positive_int("--eval-episodes"),
        default=None,
        help="episodes per evaluation (default: the profile's)",
    )
    run.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write evaluation returns and diagnostics as TensorBoard scalars (extra tensorboard)",
    )
    _add_reference_returns(run)

    listing = sub.add_parser("list", help="variants, environments and profiles")
    listing.add_argument("--variants-file", default=None, metavar="TOML", help="also list the variants of this file")

    check = sub.add_parser("check", help="regression-check learning curves against a committed baseline")
    check.add_argument(
        "--baseline", default=str(DEFAULT_BASELINE), help=f"baseline folder (default {DEFAULT_BASELINE})"
    )
    check.add_argument(
        "--variants",
        default=",".join(DEFAULT_CHECK_VARIANTS),
        help=f"comma-separated variants (default {','.join(DEFAULT_CHECK_VARIANTS)})",
    )
    check.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field for every checked variant (repeatable)",
    )
    check.add_argument(
        "--seeds",
        type=_positive_int("--seeds"),
        default=DEFAULT_CHECK_SEEDS,
        help=f"seeds per variant (default {DEFAULT_CHECK_SEEDS})",
    )
    check.add_argument(
        "--seed-offset",
        type=_number("--seed-offset", int, "a whole number", lambda v: v >= 0, ">= 0"),
        default=None,
        help="first seed (default 0, the baseline's; with --results: all seeds there)",
    )
    check.add_argument(
        "--steps", type=_positive_int("--steps"), default=None, help="env steps (default: the ci profile's)"
    )
    check.add_argument(
        "--tolerance",
        type=_nonnegative_float("--tolerance"),
        default=DEFAULT_TOLERANCE,
        help=f"allowed drop below the baseline interval, in normalized score (default {DEFAULT_TOLERANCE})",
    )
    check.add_argument("--workers", type=_positive_int("--workers"), default=os.cpu_count() or 1)
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

    bench = sub.add_parser("bench", help="update time vs the FLOP floor, member scaling, env steps/s vs SB3")
    bench.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    bench.add_argument("--repeats", type=_positive_int("--repeats"), default=100, help="timed updates per case")
    bench.add_argument("--steps", type=_positive_int("--steps"), default=3000, help="env steps of the end-to-end case")
    bench.add_argument("--members", default="1,4,8,16", help="member counts to time (default 1,4,8,16)")
    bench.add_argument(
        "--precisions", default="fp32,bf16", help="spec precisions to time side by side (default fp32,bf16)"
    )

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

    null = sub.add_parser("null-study", help="the verdict rule's error rate on null reports (README: calibration)")
    null.add_argument("salt0", help="results folder of the variant (the reference side)")
    null.add_argument("salt1", help="the same variant and seeds trained with --set salt=1")
    null.add_argument("--variant", default="reference")
    null.add_argument("--env", default="Pendulum-v1")
    null.add_argument("--reports", type=_positive_int("--reports"), default=500, help="null reports (default 500)")
    null.add_argument(
        "--compared",
        type=_positive_int("--compared"),
        default=8,
        help="variants compared with the reference in each (default 8, as the default report)",
    )
    null.add_argument("--seeds", type=_positive_int("--seeds"), default=5, help="seeds per variant (default 5)")

    power = sub.add_parser("power-study", help="the verdict rule's detection rate of a real effect")
    power.add_argument("reference", help="results folder of the reference")
    power.add_argument("effect", help="results folder of the same variant with an effect (e.g. --set lr_*=...)")
    power.add_argument("--variant", default="reference")
    power.add_argument("--env", default="Pendulum-v1")
    power.add_argument("--ns", default="5,10", help="seeds per side (default 5,10)")
    power.add_argument("--families", default="1,8", help="family sizes whose per-comparison level to use (default 1,8)")
    power.add_argument("--draws", type=_positive_int("--draws"), default=500)
    power.add_argument("--metric", default="final_return", choices=("final_return", "auc_return"))
    power.add_argument(
        "--shift",
        type=_finite_float("--shift"),
        default=None,
        help="move the effect folder's normalized scores so that their mean difference from the "
        "reference is exactly this: a known effect in real noise (e.g. the null study's two salts)",
    )

    shapes = sub.add_parser(
        "shape-study",
        help="the verdict rules on returns of committed campaigns' shapes: null reports, shifts, replays",
    )
    shapes.add_argument("study", choices=("null", "shift", "replay"))
    shapes.add_argument("folders", nargs="+", help="campaign results folders, one environment each")
    shapes.add_argument("--reports", type=_positive_int("--reports"), default=1000, help="reports per design (1000)")
    shapes.add_argument(
        "--adastop-reports", type=_positive_int("--adastop-reports"), default=100, help="for the slower adastop (100)"
    )
    shapes.add_argument("--compared", type=_positive_int("--compared"), default=9, help="null variants a report (9)")
    shapes.add_argument("--seeds", default="5,10,20", help="fixed designs' seeds (5,10,20)")
    shapes.add_argument("--look-every", type=_positive_int("--look-every"), default=5)
    shapes.add_argument("--max-seeds", type=_positive_int("--max-seeds"), default=30)
    shapes.add_argument(
        "--rules", default="paired:pocock,paired:obrien-fleming", help="sequential rules[:spending], comma-separated"
    )
    shapes.add_argument("--shifts", default="0.1,0.25", help="shift study: normalized shifts (0.1,0.25)")
    shapes.add_argument("--metric", default="final_return", choices=("final_return", "auc_return"))

    report = sub.add_parser("report", help="statistical report of a results folder")
    report.add_argument(
        "results",
        nargs="+",
        help="results folder, e.g. results/latest; more than one are read "
        "as one (a study beside the campaign whose reference runs it pairs with)",
    )
    report.add_argument(
        "--variants",
        default=None,
        type=_variant_names,
        help="comma-separated variants to judge against the reference (default: every one found)",
    )
    report.add_argument(
        "--reference",
        default=None,
        metavar="VARIANT",
        help="the variant every other is judged against (default: reference); it must have runs "
        "in the results, e.g. one study variant against another",
    )
    report.add_argument("--out", default=None, help="report folder (default reports/<name of results folder>)")
    _add_reference_returns(report)

    status = sub.add_parser("status", help="the runs of a results folder: finished, training now, or stopped")
    status.add_argument("results", help="results folder, e.g. results/latest")

    export = sub.add_parser("export", help="write each run's final policy as ONNX or TorchScript, and check it")
    export.add_argument("results", help="results folder, e.g. results/latest")
    export.add_argument("--format", default="onnx", choices=("onnx", "torchscript"), help="default onnx")
    return parser


def _add_reference_returns(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="ENV=RETURN",
        help="normalization target return of ENV (normalized score 1), overriding the table (repeatable)",
    )
    parser.add_argument(
        "--random",
        action="append",
        default=[],
        metavar="ENV=RETURN",
        help="random-policy return of ENV (normalized score 0), overriding the table (repeatable)",
    )


def cmd_list(variants_file: str | None = None) -> int:
    print("Variants (differences from reference):")
    for name, entry in {**CATALOG, **user_variants(variants_file)}.items():
        diff = entry.spec.differences(REFERENCE)
        changes = ", ".join(f"{k}={v[0]}" for k, v in diff.items()) or "-"
        if entry.implementation != "native":
            changes += f"; trained by {entry.implementation}"
        if entry.same_as:
            changes += f"; same arithmetic as {entry.same_as} (not run by --variants all)"
        print(f"  {name:14s} {entry.description}")
        print(f"  {'':14s} fields: {changes}")
    print("Environments (--envs all):")
    for env_id in ENV_IDS:
        print(f"  {env_id}")
    print("  and any other Gymnasium id with Box observations and bounded Box actions (MuJoCo's with the mujoco")
    print("  extra), or module:Class / module:factory with --env-kwargs JSON; these need --steps")
    print("Normalization (R_random -> R_target; elsewhere give --target ENV=RETURN --random ENV=RETURN):")
    for env_id in normalization.R_TARGET:
        print(f"  {env_id:26s} {normalization.R_RANDOM[env_id]:10g} -> {normalization.R_TARGET[env_id]:g}")
    print("Profiles (env steps per run):")
    for p in PROFILES.values():
        steps = ", ".join(f"{k} {v:,}" for k, v in p.steps.items())
        print(f"  {p.name:6s} {p.description}  [{steps}; {p.eval_episodes} eval episodes]")
    return 0


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from .running import ray_backend

    if args.backend == "ray" and args.stop_after is not None:
        raise UsageError("--stop-after works with the local backend only (a Ray cluster schedules the jobs itself)")
    if args.backend == "ray" and not ray_backend.ray_available():
        raise UsageError(ray_backend.INSTALL_HINT)
    if args.tensorboard:
        from .running import tensorboard_log

        if not tensorboard_log.available():
            raise UsageError(tensorboard_log.INSTALL_HINT)
    if args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; valid: {', '.join(PROFILES)}")
    overrides, variants = select_variants(args.variants, args.overrides, user_variants(args.variants_file))
    refs = resolve_envs(args.envs, args.env_kwargs)
    envs = list(refs)
    targets, randoms = reference_returns(args, refs)
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
    device = _resolve_device(args.device)
    members = args.members or (args.seeds if device == "cuda" else 1)
    out = Path(args.out)
    if args.dry_run and args.fresh:
        raise UsageError("--dry-run with --fresh: --fresh deletes run folders as it plans; drop one of them")
    problem = None if args.dry_run else grid.check_writable(out)
    if problem:
        raise UsageError(problem)
    request = grid.GridRequest(
        variants=variants,
        overrides=overrides,
        envs=envs,
        seeds=list(range(args.seeds)),
        budgets=budgets,
        out=out,
        device=device,
        members=members,
        command=("python", "-m", "harness", *argv),
        env_refs=refs,
        tensorboard=args.tensorboard,
        normalization={
            e: {k: v for k, v in (("target", targets.get(e)), ("random", randoms.get(e))) if v is not None}
            for e in envs
            if e in targets or e in randoms
        },
    )
    try:
        jobs, skipped, elsewhere = grid.plan(request, fresh=args.fresh)
    except grid.ConfigConflict as exc:
        raise UsageError(str(exc)) from None
    runs = len(variants) * len(envs) * args.seeds
    workers = 1 if device == "cuda" else args.workers
    eta = grid.estimate_seconds(jobs, workers)
    print(
        f"grid: {len(variants)} variants x {len(envs)} envs x {args.seeds} seeds = {runs} runs "
        f"({skipped} already finished, "
        + (f"{elsewhere} being trained by another process, " if elsewhere else "")
        + f"{len(jobs)} jobs of up to {members} seeds, {workers} workers, {device}); "
        f"estimated {eta / 60:.1f} min",
        flush=True,
    )
    slow = grid.emulated_bf16_warning(jobs, device)
    if slow:
        print(slow, flush=True)
    if args.dry_run:
        print(grid.plan_text(jobs) if jobs else "nothing to train: every run is finished or being trained elsewhere")
        return 0
    if args.backend == "ray":
        progress = grid.Progress(jobs)
        try:
            ray_backend.execute_ray(jobs, args.address, progress)
        finally:
            progress.close()
    else:
        # Published while this grid runs, so that the live report of another grid on the same folder
        # counts these runs among those still to come (and ours counts theirs).
        queue = records.hold_queue(out, [(job.env_id, job.variant, seed) for job in jobs for seed in job.seeds])
        try:
            live = (
                None
                if args.no_report
                else LiveReport(
                    out,
                    _report_dir(out, None),
                    args.report_every,
                    targets,
                    randoms,
                    still_to_come=lambda: grid.still_to_come(out),
                )
            )
            deadline = None if args.stop_after is None else time.time() + 60 * args.stop_after
            grid.execute(jobs, workers, on_finished=live, deadline=deadline)
        finally:
            queue.release()
    rows = grid.collect_runs(out)
    grid.write_runs_csv(out, rows)
    counts = grid.print_state_table([r for r in rows if r["variant"] in variants and r["env"] in envs])
    print(f"runs.csv in {out}")
    if not args.no_report:
        cmd_report(out, None, targets, randoms, pending=grid.still_to_come(out))  # another grid's, if any
    bad = sum(v for k, v in counts.items() if k != "complete")
    return 1 if args.strict and bad else 0


def cmd_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from .judging import check

    overrides, variants = select_variants(args.variants, args.overrides, user_variants(args.variants_file))
    variant_names = list(variants)
    budget = budget_for("ci", check.CHECK_ENV, args.steps)
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
            envs=[check.CHECK_ENV],
            seeds=seeds,
            budgets={check.CHECK_ENV: budget},
            out=new_dir,
            device="cpu",
            members=1,
            command=("python", "-m", "harness", *argv),
        )
        jobs = grid.plan(request, fresh=True).jobs
        print(
            f"check: training {len(variants)} variants x {len(seeds)} seeds on {check.CHECK_ENV}, "
            f"{budget.total_steps} steps each, {args.workers} workers",
            flush=True,
        )
        grid.execute(jobs, args.workers)
    if args.update_baseline:
        failed = check.unfinished_runs(new_dir, variant_names)
        if failed:
            raise UsageError(f"check --update-baseline: a baseline holds complete runs only; {failed}")
        check.write_baseline(
            new_dir,
            baseline,
            variant_names,
            {
                "variants": variant_names,
                "seeds": args.seeds,
                "seed_offset": args.seed_offset or 0,
                "overrides": overrides,
                "env": check.CHECK_ENV,
                "budget": budget.to_dict(),
            },
        )
        print(f"check: baseline written to {baseline}")
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


def _print_false_alarm_study(args: argparse.Namespace, variant_names: list[str], baseline: Path, results: Path) -> int:
    from .judging import check

    try:
        study = check.false_alarm_study(baseline, results, variant_names, args.seeds, args.tolerance)
    except ValueError as exc:
        raise UsageError(f"check: {exc}") from None
    print(f"false-alarm study: {results} against {baseline}, {', '.join(variant_names)}, tolerance {args.tolerance}")
    for line in check.format_false_alarm_study(study):
        print(line)
    return 0


def _require_matching_baseline(baseline: Path, budget) -> None:
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


def _counts(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated whole numbers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: each number must be >= 1")
    return values


def _shifts(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--shifts {text!r}: expected comma-separated numbers") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise UsageError(f"--shifts {text!r}: expected finite numbers")
    return values


def cmd_shape_study(args: argparse.Namespace) -> int:
    from .judging import shape_studies

    folders = [Path(f) for f in args.folders]
    for folder in folders:
        problem = records.not_a_results_folder(folder)
        if problem:
            raise UsageError(f"shape-study: results folder {folder} {problem}")
    try:
        designs = shape_studies.parse_rules(args.rules, args.look_every, args.max_seeds)
        if args.study == "null":
            seeds = _counts(args.seeds, "--seeds")
            lines = shape_studies.run_null(folders, seeds, designs, args.reports, args.adastop_reports, args.compared)
        elif args.study == "shift":
            shifts = _shifts(args.shifts)
            seeds = _counts(args.seeds, "--seeds")
            lines = shape_studies.run_shift(folders, shifts, seeds, designs, args.reports, args.compared, args.metric)
        else:
            lines = shape_studies.run_replay(folders, designs)
    except ValueError as exc:  # StudyError, and a design the sequential module refuses
        raise UsageError(f"shape-study: {exc}") from None
    for line in lines:
        print(line)
    return 0


def cmd_calibration(args: argparse.Namespace) -> int:
    from .judging import calibration

    folders = [args.salt0, args.salt1] if args.command == "null-study" else [args.reference, args.effect]
    for folder in folders:
        problem = records.not_a_results_folder(Path(folder))
        if problem:
            raise UsageError(f"{args.command}: results folder {folder} {problem}")
    try:
        if args.command == "null-study":
            study = calibration.null_study(
                Path(args.salt0), Path(args.salt1), args.variant, args.env, args.reports, args.compared, args.seeds
            )
            lines = calibration.format_null_study(study, Path(args.salt0), Path(args.salt1))
        else:
            rows = calibration.power_study(
                Path(args.reference),
                Path(args.effect),
                args.variant,
                args.env,
                _counts(args.ns, "--ns"),
                _counts(args.families, "--families"),
                args.draws,
                metric=args.metric,
                shift=args.shift,
            )
            lines = calibration.format_power_study(
                rows, Path(args.reference), Path(args.effect), args.metric, args.shift
            )
    except calibration.CalibrationError as exc:
        raise UsageError(f"{args.command}: {exc}") from None
    for line in lines:
        print(line)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from .running.bench import run_bench

    try:
        members = [int(m) for m in args.members.split(",")]
    except ValueError:
        raise UsageError(f"--members {args.members!r}: expected comma-separated whole numbers") from None
    if not members or min(members) < 1:
        raise UsageError("--members: each count must be >= 1")
    precisions = _split_names(args.precisions, list(PRECISIONS), "precision")
    device = _resolve_device(args.device)
    for line in run_bench(device, args.repeats, args.steps, members, precisions):
        print(line, flush=True)
    return 0


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from .running.gpu_check import STEPS, run_gpu_check

    steps = _split_names(args.only, list(STEPS), "step")
    _resolve_device(args.device)  # no CUDA device: one line and exit 2 before anything runs
    problem = grid.check_writable(Path(args.out))
    if problem:
        raise UsageError(problem)
    return run_gpu_check(Path(args.out), args.device, args.sizes, steps)


def cmd_report(
    results: Path,
    out: Path | None,
    targets: dict | None = None,
    randoms: dict | None = None,
    also: Sequence[Path] = (),
    variants: Sequence[str] | None = None,
    pending: int | None = None,
    reference: str | None = None,
) -> int:
    """Build the report; `targets` / `randoms` ({env: return}) override the recorded and tabled ones;
    `also`: more results folders read with `results`; `variants`: only these beside the reference;
    `pending`: runs that grids still running on `results` have yet to finish (the page says so);
    `reference`: the variant judged against, which must then have runs (None: `reference`, if it ran)."""
    try:
        from .judging.report import report_command
    except ImportError:
        print("report: the report module is not available in this checkout", file=sys.stderr)
        return 2
    return report_command(
        Path(results),
        _report_dir(results, out),
        reference=reference,
        targets=targets,
        randoms=randoms,
        also=also,
        variants=variants,
        pending=pending,
    )


def _report_dir(results: Path, out: Path | None) -> Path:
    """The report folder of a results folder: `out`, or reports/<name of the results folder>."""
    return Path(out) if out else Path("reports") / Path(results).resolve().name


def cmd_status(results: Path) -> int:
    """Print the state of every run folder of `results` (a grid in progress, or one stopped)."""
    problem = records.not_a_results_folder(results)
    if problem:
        raise UsageError(f"status: results folder {results} {problem}")
    if not (results / "runs").is_dir():
        raise UsageError(f"status: no run folders in {results} (expected {results / 'runs'})")
    rows = grid.folder_states(results)
    if not rows:
        raise UsageError(f"status: no run folders in {results / 'runs'}")
    grid.print_state_table(rows)
    for r in rows:
        if r["state"] == "training":
            print(
                f"training: {r['env']} {r['variant']} seed {r['seed']}"
                + (f" (pid {r['holder']})" if r["holder"] else "")
                + _steps_text(r)
            )
    for r in rows:
        if r["state"] == "stopped":
            print(
                f"stopped: {r['env']} {r['variant']} seed {r['seed']}{_steps_text(r)} "
                "(rerun its grid's command to resume it from its last checkpoint)"
            )
    grids = len(records.live_queues(results))
    if grids:
        print(f"still to come: {grid.still_to_come(results)} runs queued by {grids} grid(s) running on this folder")
    return 0


def _steps_text(row: dict) -> str:
    if row["env_steps"] is None:
        return ""
    return (
        f": {row['env_steps']:,}"
        + (f" of {row['total_steps']:,}" if row["total_steps"] else "")
        + " env steps recorded"
    )


def cmd_export(args: argparse.Namespace) -> int:
    from .running.export import ExportError, export_command

    try:
        return export_command(Path(args.results), args.format)
    except ExportError as exc:
        raise UsageError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # A shell starts background jobs with SIGINT ignored; a grid must still stop cleanly on it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "list":
            return cmd_list(args.variants_file)
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "check":
            return cmd_check(args, argv)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "gpu-check":
            return cmd_gpu_check(args)
        if args.command == "shape-study":
            return cmd_shape_study(args)
        if args.command in ("null-study", "power-study"):
            return cmd_calibration(args)
        if args.command == "report":
            return cmd_report(
                Path(args.results[0]),
                Path(args.out) if args.out else None,
                *reference_returns(args),
                also=[Path(r) for r in args.results[1:]],
                variants=args.variants,
                reference=args.reference,
            )
        if args.command == "export":
            return cmd_export(args)
        if args.command == "status":
            return cmd_status(Path(args.results))
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
    except grid.WorkerCrashed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except WriteError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 2
    return 2
