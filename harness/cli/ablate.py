"""`harness ablate VARIANT`: the grid that attributes a variant's difference from the reference to its
differences, run with every `run` option.

From the two specs (config, not catalog names: a --variants-file variant works the same) it writes the
ablated variants and a manifest into the results folder (`harness.ablation`), then trains them with
the two ends through `run`'s own path; the report of the folder adds the attribution table
(`harness.judging.attribution`).
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from variants.ablation import AblationError
from variants.catalog import CATALOG

from .. import ablation, records
from .common import UsageError, apply_overrides, score_anchors, user_variants
from .report import cmd_report
from .run import add_run_options, cmd_run, grid_request


def add_ablate(sub: argparse._SubParsersAction) -> None:
    """The `ablate` subcommand's parser: VARIANT, --reference, --ends-from and every option of `run`."""
    ablate = sub.add_parser(
        "ablate",
        help="attribute a variant's gain: the reference plus each of its differences, the variant minus each",
    )
    ablate.add_argument("variant", metavar="VARIANT", help="catalog or --variants-file name of the variant to ablate")
    ablate.add_argument(
        "--reference",
        default="reference",
        metavar="NAME",
        help="the variant it is ablated against (default reference); catalog or --variants-file name",
    )
    ablate.add_argument(
        "--ends-from",
        default=None,
        metavar="RESULTS",
        help="a results folder holding VARIANT's and the reference's runs of the same specs (a campaign): "
        "they are not trained again, and the report reads that folder with --out (with --until-decided "
        "they are copied into --out, which each look judges; seeds RESULTS lacks are trained there)",
    )
    add_run_options(ablate)
    ablate.set_defaults(handle=cmd_ablate)


def _ends(args: argparse.Namespace) -> dict:
    """{name: spec} of the reference and the variant, after --set; both must be trained natively."""
    known = {**CATALOG, **user_variants(args.variants_file)}
    for flag, name in (("--reference", args.reference), ("VARIANT", args.variant)):
        if name not in known:
            raise UsageError(
                f"ablate {flag} {name!r}: not a catalog or --variants-file name; valid: {', '.join(known)}"
            )
        if known[name].implementation != "native":
            raise UsageError(f"ablate {flag} {name}: trained by {known[name].implementation}; only native specs ablate")
    if args.reference == args.variant:
        raise UsageError(f"ablate: {args.variant} against itself: give another --reference")
    _, entries = apply_overrides(args.overrides, {n: known[n] for n in (args.reference, args.variant)})
    return {name: entry.spec for name, entry in entries.items()}


def _check_ends_from(folder: Path, ends: dict) -> None:
    problem = records.not_a_results_folder(folder)
    if problem:
        raise UsageError(f"ablate --ends-from: results folder {folder} {problem}")
    recorded = ablation.recorded_specs(folder)
    for name, spec in ends.items():
        if recorded.get(name) != spec:
            raise UsageError(
                f"ablate --ends-from {folder}: no runs of {name} with "
                + ("this spec" if name in recorded else "that name")
                + "; train the ends in --out instead (drop --ends-from)"
            )


def cmd_ablate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Write the ablation's variants file and manifest into --out and train it as `run` would. The grid
    is checked from a scratch copy of the files first, so that input `run` refuses leaves --out as it
    was (a dry run never writes there)."""
    ends = _ends(args)
    out, ends_from = Path(args.out), None if args.ends_from is None else Path(args.ends_from)
    if ends_from is not None:
        _check_ends_from(ends_from, ends)
        if ends_from.resolve() == out.resolve():
            raise UsageError("ablate --ends-from: give a folder other than --out")
    command = shlex.join(["python", "-m", "harness", *argv])
    # A sequential grid judges each look from --out's records alone: the ends' runs are copied there
    # from --ends-from (cmd_run_until_decided), so they are among its variants.
    copy_ends = ends_from is not None and args.until_decided
    with tempfile.TemporaryDirectory() as scratch:
        names, path = _prepare(out, ends, command, Path(scratch))
        ablated = names[2:]
        args.variants = ",".join(ablated if ends_from is not None and not copy_ends else names)
        args.variants_file = str(path)
        grid_request(args, argv)  # every refusal of run's, before anything is written
        if not args.dry_run:
            args.variants_file = str(_prepare(out, ends, command)[1])
        if args.until_decided:
            from .sequential import cmd_run_until_decided

            copied = list(ends) if copy_ends else []
            return cmd_run_until_decided(
                args,
                argv,
                copy_from=ends_from,
                copied=copied,
                compared=_compared(Path(args.variants_file).parent),
                reference=args.reference,
            )
        report = not args.no_report
        args.no_report = args.no_report or ends_from is not None  # its report reads two folders: made below
        code = cmd_run(args, argv)
    if ends_from is not None and report and not args.dry_run:
        targets, randoms = score_anchors(args)
        cmd_report(out, None, targets, randoms, more_results=[ends_from], variants=[args.variant, *ablated])
    return code


def _compared(folder: Path) -> list[tuple[str, str]]:
    """The comparisons a sequential ablation grid judges, from the manifest in `folder`: the variant
    against the reference, each variant that adds a difference against the reference (on its own?),
    each that removes one against the variant (needed?): the attribution's own rows, so the looks give
    seeds to what the attribution asks. One that is an end (the variant less its one difference is the
    reference) is the ends' comparison already."""
    manifest = ablation.read_manifest(folder)
    if manifest is None:
        return []
    reference, variant = manifest.reference_name, manifest.variant_name
    pairs = [(variant, reference)]
    for (role, _), name in manifest.names.items():
        if name != reference:
            pairs.append((name, reference if role == "added" else variant))
    return list(dict.fromkeys(pairs))


def _prepare(out: Path, ends: dict, command: str, files_dir: Path | None = None) -> tuple[list[str], Path]:
    try:
        return ablation.prepare_grid(out, ends, command, files_dir=files_dir)
    except (AblationError, ablation.ManifestError) as exc:
        raise UsageError(f"ablate: {exc}") from None
