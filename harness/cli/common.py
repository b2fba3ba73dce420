"""What several subcommands share: the one-line usage error, argparse types, and the resolution of
`--variants`, `--set`, `--device` and the normalization anchors `--target` / `--random`.

Nothing here imports torch at import time: the parser of every subcommand is built from this module, and
`report`, `status`, `list` and `check --results` must start without loading the training code.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from variants.catalog import CATALOG, CatalogEntry, distinct_variants
from variants.spec import parse_override, with_overrides
from variants.userfile import VariantFileError, load_variants_file

from ..judging import normalization

if TYPE_CHECKING:
    from ..running.envs import EnvRef


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a `UsageError` (one line), not argparse's usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def split_names(text: str, valid: Sequence[str], kind: str) -> list[str]:
    """Comma-separated names, or `all` for every one of `valid`; an unknown name is a usage error."""
    if text.strip() == "all":
        return list(valid)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise UsageError(f"unknown {kind} {', '.join(unknown) or repr(text)}; valid: all, {', '.join(valid)}")
    return list(dict.fromkeys(names))


def _number(
    name: str, convert: Callable[[str], Any], kind: str, valid: Callable[[Any], bool], requirement: str
) -> Callable[[str], Any]:
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


def positive_int(name: str) -> Callable[[str], int]:
    """The argparse type of option `name`: a whole number >= 1."""
    return _number(name, int, "a whole number", lambda v: v >= 1, ">= 1")


def nonnegative_int(name: str) -> Callable[[str], int]:
    """The argparse type of option `name`: a whole number >= 0."""
    return _number(name, int, "a whole number", lambda v: v >= 0, ">= 0")


def positive_float(name: str) -> Callable[[str], float]:
    """The argparse type of option `name`: a number > 0."""
    return _number(name, float, "a number", lambda v: v > 0, "> 0")


def nonnegative_float(name: str) -> Callable[[str], float]:
    """The argparse type of option `name`: a number >= 0."""
    return _number(name, float, "a number", lambda v: v >= 0, ">= 0")


def finite_float(name: str) -> Callable[[str], float]:
    """The argparse type of option `name`: a finite number."""
    return _number(name, float, "a number", math.isfinite, "finite")


def resolve_device(choice: str) -> str:
    """`--device` (auto, cpu or cuda) as the torch device to use; cuda without a CUDA device is a usage error."""
    import torch  # only the commands that train or time the learner get here

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "--device cuda: no CUDA device is visible to torch (install a CUDA build of torch; see README)"
        )
    return choice


def add_set_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """`--set KEY=VALUE` (repeatable), collected in `args.overrides`."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text)


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


def select_variants(
    text: str,
    assignments: Sequence[str],
    user: dict[str, CatalogEntry] | None = None,
    *,
    to_train: bool = True,
) -> tuple[dict, dict[str, CatalogEntry]]:
    """`--variants` and `--set` resolved to catalog entries (that can train here, with `to_train`).

    `all` means every distinct entry (`distinct_variants`: none whose arithmetic another computes). With
    `to_train`, an entry that cannot run in this Python with these overrides (a peer library not
    installed, or a spec it cannot realize) is left out of `all` with a note on stderr, and named
    explicitly it is a usage error. Without it (a command that reads the variants' run records) nothing
    asks the implementations: that would import a peer library and torch to judge files.
    """
    catalog = {**CATALOG, **(user or {})}  # a --variants-file's entries join the catalog's names
    everything = text.strip() == "all"
    names = [*distinct_variants(), *(user or {})] if everything else split_names(text, list(catalog), "variant")
    overrides, variants = apply_overrides(assignments, {n: catalog[n] for n in names})
    if not to_train:
        return overrides, variants
    from ..running.implementations import TRAINERS  # imports a peer library only for its entries

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


def add_score_anchor_options(parser: argparse.ArgumentParser) -> None:
    """`--target ENV=RETURN` and `--random ENV=RETURN`: the returns that score 1 and 0 (repeatable)."""
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


def score_anchors(args: argparse.Namespace, refs: dict[str, EnvRef] | None = None) -> tuple[dict, dict]:
    """`--target` and `--random` as ({env label: return}, {env label: return}): the returns that a
    normalized score maps to 1 and 0. With `refs` (a run) each ENV must be one of the run's envs, given as
    its id, its module:Class or its label."""
    try:
        targets = normalization.parse_score_anchors(args.target, "--target")
        randoms = normalization.parse_score_anchors(args.random, "--random")
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
