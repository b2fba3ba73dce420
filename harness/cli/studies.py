"""`null-study`, `power-study` and `shape-study`: the verdict rules' error rate on null reports and their
detection rate of a real effect, measured on committed results folders (README: calibration; the shape
studies on the return shapes of committed campaigns, docs/statistics.md). They read run records only."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from .. import records
from .common import UsageError, finite_float, positive_int


def add_null_study(sub: argparse._SubParsersAction) -> None:
    """The `null-study` subcommand's parser."""
    null = sub.add_parser("null-study", help="the verdict rule's error rate on null reports (README: calibration)")
    null.add_argument("salt0", help="results folder of the variant (the reference side)")
    null.add_argument("salt1", help="the same variant and seeds trained with --set salt=1")
    null.add_argument("--variant", default="reference")
    null.add_argument("--env", default="Pendulum-v1")
    null.add_argument("--reports", type=positive_int("--reports"), default=500, help="null reports (default 500)")
    null.add_argument(
        "--compared",
        type=positive_int("--compared"),
        default=8,
        help="variants compared with the reference in each (default 8, as the default report)",
    )
    null.add_argument("--seeds", type=positive_int("--seeds"), default=5, help="seeds per variant (default 5)")
    null.set_defaults(handle=cmd_null_study)


def add_power_study(sub: argparse._SubParsersAction) -> None:
    """The `power-study` subcommand's parser."""
    power = sub.add_parser("power-study", help="the verdict rule's detection rate of a real effect")
    power.add_argument("reference", help="results folder of the reference")
    power.add_argument("effect", help="results folder of the same variant with an effect (e.g. --set lr_*=...)")
    power.add_argument("--variant", default="reference")
    power.add_argument("--env", default="Pendulum-v1")
    power.add_argument("--ns", default="5,10", help="seeds per side (default 5,10)")
    power.add_argument("--families", default="1,8", help="family sizes whose per-comparison level to use (default 1,8)")
    power.add_argument("--draws", type=positive_int("--draws"), default=500)
    power.add_argument("--metric", default="final_return", choices=("final_return", "auc_return"))
    power.add_argument(
        "--shift",
        type=finite_float("--shift"),
        default=None,
        help="move the effect folder's normalized scores so that their mean difference from the "
        "reference is exactly this: a known effect in real noise (e.g. the null study's two salts)",
    )
    power.set_defaults(handle=cmd_power_study)


def add_shape_study(sub: argparse._SubParsersAction) -> None:
    """The `shape-study` subcommand's parser."""
    shapes = sub.add_parser(
        "shape-study",
        help="the verdict rules on returns of committed campaigns' shapes: null reports, shifts, replays",
    )
    shapes.add_argument("study", choices=("null", "shift", "replay"))
    shapes.add_argument("folders", nargs="+", help="campaign results folders, one environment each")
    shapes.add_argument("--reports", type=positive_int("--reports"), default=1000, help="reports per design (1000)")
    shapes.add_argument(
        "--adastop-reports", type=positive_int("--adastop-reports"), default=100, help="for the slower adastop (100)"
    )
    shapes.add_argument("--compared", type=positive_int("--compared"), default=9, help="null variants a report (9)")
    shapes.add_argument("--seeds", default="5,10,20", help="fixed designs' seeds (5,10,20; none: no fixed design)")
    shapes.add_argument(
        "--methods", default="many-to-one max-t,Bonferroni", help="null study: the fixed designs' methods"
    )
    shapes.add_argument("--look-every", type=positive_int("--look-every"), default=5)
    shapes.add_argument("--max-seeds", type=positive_int("--max-seeds"), default=30)
    shapes.add_argument(
        "--rules",
        default="paired:pocock,paired:obrien-fleming",
        help="sequential rules, comma-separated; a paired rule may add :SPENDING, :MULTIPLICITY and :futility=P "
        "(e.g. paired:obrien-fleming:futility=0.05)",
    )
    shapes.add_argument(
        "--crude-looks",
        default=None,
        help="shift and replay studies: also the crude rule (paired t, Bonferroni over comparisons and "
        "looks) at these seed counts, e.g. 5,10",
    )
    shapes.add_argument("--shifts", default="0.1,0.25", help="shift study: normalized shifts (0.1,0.25)")
    shapes.add_argument("--metric", default="final_return", choices=("final_return", "auc_return"))
    shapes.set_defaults(handle=cmd_shape_study)


def _require_results(command: str, folders: Sequence[str]) -> None:
    """A usage error naming the first of `folders` that is not a results folder."""
    for folder in folders:
        problem = records.not_a_results_folder(Path(folder))
        if problem:
            raise UsageError(f"{command}: results folder {folder} {problem}")


def _counts(text: str, flag: str) -> list[int]:
    """`flag`'s comma-separated whole numbers, each >= 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated whole numbers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: each number must be >= 1")
    return values


def cmd_null_study(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Print the null study of two salts of one variant."""
    from ..judging import calibration

    _require_results(args.command, [args.salt0, args.salt1])
    try:
        study = calibration.null_study(
            Path(args.salt0), Path(args.salt1), args.variant, args.env, args.reports, args.compared, args.seeds
        )
    except calibration.CalibrationError as exc:
        raise UsageError(f"{args.command}: {exc}") from None
    for line in calibration.format_null_study(study, Path(args.salt0), Path(args.salt1)):
        print(line)
    return 0


def cmd_power_study(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Print the power study of a reference folder against an effect folder."""
    from ..judging import calibration

    _require_results(args.command, [args.reference, args.effect])
    try:
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
    except calibration.CalibrationError as exc:
        raise UsageError(f"{args.command}: {exc}") from None
    for line in calibration.format_power_study(rows, Path(args.reference), Path(args.effect), args.metric, args.shift):
        print(line)
    return 0


def _shifts(text: str) -> list[float]:
    """`--shifts`' comma-separated finite numbers."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--shifts {text!r}: expected comma-separated numbers") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise UsageError(f"--shifts {text!r}: expected finite numbers")
    return values


def cmd_shape_study(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Print the null, shift or replay study of the sequential rules on the campaigns' return shapes."""
    from ..judging import sequential, shape_studies

    folders = [Path(f) for f in args.folders]
    _require_results("shape-study", args.folders)
    try:
        draws = sequential.BOUNDARY_DRAWS if args.study == "replay" else shape_studies.STUDY_BOUNDARY_DRAWS
        designs = shape_studies.parse_rules(args.rules, args.look_every, args.max_seeds, draws)
        crude = _counts(args.crude_looks, "--crude-looks") if args.crude_looks else []
        if args.study == "null":
            seeds = [] if args.seeds.strip() == "none" else _counts(args.seeds, "--seeds")
            methods = [m.strip() for m in args.methods.split(",") if m.strip()]
            unknown = sorted(set(methods) - set(shape_studies.FIXED_METHODS))
            if unknown:
                raise UsageError(
                    f"--methods: unknown {', '.join(unknown)} (known: {', '.join(shape_studies.FIXED_METHODS)})"
                )
            lines = shape_studies.run_null(
                folders, seeds, designs, args.reports, args.adastop_reports, args.compared, methods=methods
            )
        elif args.study == "shift":
            shifts = _shifts(args.shifts)
            seeds = _counts(args.seeds, "--seeds")
            lines = shape_studies.run_shift(
                folders, shifts, seeds, designs, args.reports, args.compared, args.metric, crude_looks=crude
            )
        else:
            lines = shape_studies.run_replay(folders, designs, crude)
        for line in lines:
            print(line, flush=True)  # a study's rows as they are measured
    except ValueError as exc:  # StudyError, and a design the sequential module refuses
        raise UsageError(f"shape-study: {exc}") from None
    return 0
