"""The subcommands that read run records and train nothing: `report`, `status` and `list`.

None of them imports torch: their handlers import the judging code (pandas, matplotlib) or the records'
readers only when they run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import records
from .common import UsageError, add_score_anchor_options, score_anchors, user_variants


def _variant_names(text: str) -> list[str]:
    """A report's --variants: names as run records spell them (a variants file's too), checked against
    the records, not the catalog."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"--variants needs at least one name, got {text!r}")
    return names


def add_report(sub: argparse._SubParsersAction) -> None:
    """The `report` subcommand's parser."""
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
    add_score_anchor_options(report)
    report.set_defaults(handle=_handle_report)


def _handle_report(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`report RESULTS... [--out] [--variants] [--reference] [--target/--random]` as a `cmd_report` call."""
    return cmd_report(
        Path(args.results[0]),
        Path(args.out) if args.out else None,
        *score_anchors(args),
        more_results=[Path(r) for r in args.results[1:]],
        variants=args.variants,
        reference=args.reference,
    )


def cmd_report(
    results: Path,
    out: Path | None,
    targets: dict | None = None,
    randoms: dict | None = None,
    more_results: Sequence[Path] = (),
    variants: Sequence[str] | None = None,
    pending: int | None = None,
    reference: str | None = None,
) -> int:
    """Build the report; `targets` / `randoms` ({env: return}) override the recorded and tabled ones;
    `more_results`: more results folders read with `results`; `variants`: only these beside the reference;
    `pending`: runs that grids still running on `results` have yet to finish (the page says so);
    `reference`: the variant judged against, which must then have runs (None: `reference`, if it ran)."""
    try:
        from ..judging.report import report_command
    except ImportError:
        print("report: the report module is not available in this checkout", file=sys.stderr)
        return 2
    return report_command(
        Path(results),
        report_dir(results, out),
        reference=reference,
        targets=targets,
        randoms=randoms,
        more_results=more_results,
        variants=variants,
        pending=pending,
    )


def report_dir(results: Path, out: Path | None) -> Path:
    """The report folder of a results folder: `out`, or reports/<name of the results folder>."""
    return Path(out) if out else Path("reports") / Path(results).resolve().name


def add_verdict_matrix(sub: argparse._SubParsersAction) -> None:
    """The `verdict-matrix` subcommand's parser."""
    matrix = sub.add_parser(
        "verdict-matrix",
        help="every variant x environment verdict at a glance, from reports' verdicts.csv (PNG and Markdown)",
    )
    matrix.add_argument("reports", nargs="+", help="report folders, one study each, e.g. reports/pendulum-20k")
    matrix.add_argument(
        "--out", default="reports/verdict_matrix.png", help="the PNG (default reports/verdict_matrix.png)"
    )
    matrix.add_argument("--markdown", default=None, help="also write the matrix as Markdown tables to this file")
    matrix.set_defaults(handle=_handle_verdict_matrix)


def _handle_verdict_matrix(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from ..judging import verdict_matrix

    try:
        frame = verdict_matrix.write_matrix(
            [Path(r) for r in args.reports], Path(args.out), Path(args.markdown) if args.markdown else None
        )
    except verdict_matrix.MatrixError as exc:
        raise UsageError(f"verdict-matrix: {exc}") from exc
    counts = frame["verdict"].map(verdict_matrix.short_verdict).value_counts()
    told = ", ".join(f"{counts.get(v, 0)} {v}" for v in verdict_matrix.COLORS)
    print(
        f"verdict-matrix: {len(frame)} comparisons ({told}) -> {args.out}"
        + (f", {args.markdown}" if args.markdown else "")
    )
    return 0


def add_status(sub: argparse._SubParsersAction) -> None:
    """The `status` subcommand's parser."""
    status = sub.add_parser("status", help="the runs of a results folder: finished, training now, or stopped")
    status.add_argument("results", help="results folder, e.g. results/latest")
    status.set_defaults(handle=lambda args, argv: cmd_status(Path(args.results)))


def cmd_status(results: Path) -> int:
    """Print the state of every run folder of `results` (a grid in progress, or one stopped)."""
    problem = records.not_a_results_folder(results)
    if problem:
        raise UsageError(f"status: results folder {results} {problem}")
    if not (results / "runs").is_dir():
        raise UsageError(f"status: no run folders in {results} (expected {results / 'runs'})")
    rows = records.folder_states(results)
    if not rows:
        raise UsageError(f"status: no run folders in {results / 'runs'}")
    if all(r["state"] == "inconsistent" for r in rows):
        raise UsageError(f"status: no run folder in {results / 'runs'} has records that agree ({rows[0]['problem']})")
    records.print_state_table(rows)
    for r in rows:
        if r["state"] == "inconsistent":
            print(
                f"inconsistent: {r['env']} {r['variant']} seed {r['seed']}: {r['problem']} (run --repair retrains it)"
            )
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
        print(f"still to come: {records.still_to_come(results)} runs queued by {grids} grid(s) running on this folder")
    _print_looks(results)
    return 0


def _print_looks(results: Path) -> None:
    """Where each comparison of a sequential grid (`run --until-decided`) stands, if `results` is one."""
    from ..judging import looks

    try:
        state = looks.read_looks(results)
    except looks.LooksError as exc:
        print(f"warning: {exc}")
        return
    for line in looks.summary_lines(state) if state is not None else ():
        print(line)


def _steps_text(row: dict) -> str:
    """': N of M env steps recorded' for a `folder_states` row of an unfinished run ('' when unknown)."""
    if row["env_steps"] is None:
        return ""
    return (
        f": {row['env_steps']:,}"
        + (f" of {row['total_steps']:,}" if row["total_steps"] else "")
        + " env steps recorded"
    )


def add_list(sub: argparse._SubParsersAction) -> None:
    """The `list` subcommand's parser."""
    listing = sub.add_parser("list", help="variants, environments and profiles")
    listing.add_argument("--variants-file", default=None, metavar="TOML", help="also list the variants of this file")
    listing.set_defaults(handle=lambda args, argv: cmd_list(args.variants_file))


def cmd_list(variants_file: str | None = None) -> int:
    """Print the catalog's variants (and a variants file's), the environments, normalization and profiles."""
    from variants.catalog import CATALOG, REFERENCE

    from ..judging import normalization
    from ..running.envs import ENV_IDS
    from ..running.profiles import PROFILES

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
