"""Variants from a user's TOML file (`--variants-file`), validated like `--set` and the catalog.

The file is an array of tables, one per variant:

    [[variant]]
    name = "small-batch"                # letters, digits, '.', '_', '-'; not a catalog name
    description = "reference with batch 64 and 64x64 networks"
    base = "reference"                  # optional: the catalog entry it starts from (default reference)
    batch_size = 64                     # any VariantSpec field (python -m harness list shows them)
    hidden_sizes = [64, 64]

Values take TOML's own types: strings for the choice fields, integers, floats (an integer is accepted
for a float field), arrays of integers for `hidden_sizes`; the string "none" for an optional field
means its default. Every error is one line naming the file, the entry and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tomllib

from .catalog import CATALOG, CatalogEntry
from .spec import field_names, field_types, literal_choices, optional_inner

ENTRY_KEYS = ("name", "description", "base")  # what an entry holds besides spec fields
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RESERVED_NAMES = frozenset({"all"})


class VariantFileError(ValueError):
    """A variants file that cannot be used; the message is one line."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _coerce(value: Any, hint: Any, field: str) -> Any:
    """`value` as read from TOML, checked against (and converted to) the field's type; raises ValueError."""
    origin = typing.get_origin(hint)
    inner = optional_inner(hint)
    if inner is not None:
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        return _coerce(value, inner, field)
    if origin is Literal:
        choices = literal_choices(field)
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value
    if origin is tuple:
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise ValueError(f"{value!r} is not an array of integers")
        return tuple(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        return value
    if hint is int:
        if not _is_int(value):
            raise ValueError(f"{value!r} is not an integer")
        return value
    if hint is float:
        if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return float(value)
    raise ValueError(f"a {hint} field cannot be set from a variants file")


def parse_entry(
    entry: Mapping[str, Any], where: str, catalog: Mapping[str, CatalogEntry] = CATALOG
) -> tuple[str, CatalogEntry]:
    """One `[[variant]]` table as (name, CatalogEntry); `where` prefixes every error message."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise VariantFileError(f'{where}: no name (add name = "...")')
    if not NAME_PATTERN.fullmatch(name) or name in RESERVED_NAMES:
        raise VariantFileError(f"{where}: name {name!r} must be letters, digits, '.', '_' or '-' (and not 'all')")
    where = f"{where} ({name!r})"
    description = entry.get("description")
    if not isinstance(description, str) or not description.strip():
        raise VariantFileError(f'{where}: no description (add description = "...")')
    base_name = entry.get("base", "reference")
    if base_name not in catalog:
        raise VariantFileError(f"{where}: base {base_name!r} is not a catalog variant; valid: {', '.join(catalog)}")
    hints = field_types()
    changes = {}
    for key, value in entry.items():
        if key in ENTRY_KEYS:
            continue
        if key not in hints:
            raise VariantFileError(f"{where}: unknown field {key!r}; valid fields: {', '.join(field_names())}")
        try:
            changes[key] = _coerce(value, hints[key], key)
        except ValueError as exc:
            raise VariantFileError(f"{where}: field {key}: {exc}") from None
    base = catalog[base_name]
    try:
        spec = dataclasses.replace(base.spec, **changes)
    except (ValueError, TypeError) as exc:
        raise VariantFileError(f"{where}: {exc}") from None
    # Everything else about the base (which code trains it, ...) carries over; `same_as` does not:
    # the new spec is not the one another entry was tested equal to.
    fields = {f.name for f in dataclasses.fields(base)}
    extra = {"same_as": None} if "same_as" in fields else {}
    return name, dataclasses.replace(base, description=description.strip(), spec=spec, **extra)


def load_variants_file(path: Path | str, catalog: Mapping[str, CatalogEntry] = CATALOG) -> dict[str, CatalogEntry]:
    """The variants of a TOML file, in file order; raises VariantFileError (one line) on any problem:
    unreadable file, invalid TOML, an entry without name or description, a duplicate name (within the
    file or with the catalog), an unknown field or a bad value."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VariantFileError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise VariantFileError(f"{path}: invalid TOML ({str(exc).splitlines()[0]})") from None
    unknown = sorted(set(data) - {"variant"})
    if unknown:
        raise VariantFileError(
            f"{path}: unknown top-level key(s) {', '.join(unknown)}; write each variant as a [[variant]] table"
        )
    entries = data.get("variant", [])
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise VariantFileError(f"{path}: no [[variant]] tables")
    out: dict[str, CatalogEntry] = {}
    for i, entry in enumerate(entries, start=1):
        name, parsed = parse_entry(entry, f"{path}: variant #{i}", catalog)
        if name in catalog or name in out:
            where = "the catalog" if name in catalog else "this file"
            raise VariantFileError(f"{path}: variant #{i}: duplicate name {name!r} (already in {where})")
        out[name] = parsed
    return out


def _toml_value(value: Any) -> str:
    """`value` (a spec field's value) as TOML that `_coerce` reads back to it; None as "none"."""
    if value is None:
        return '"none"'
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string for the names and choices used here
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form, which TOML's float grammar accepts
    return str(value)


@dataclass(frozen=True)
class FileEntry:
    """One `[[variant]]` table to write: `base` (a catalog name) with `changes` ({field: value}) applied."""

    name: str
    description: str
    base: str
    changes: Mapping[str, Any]


def variants_file_text(entries: Sequence[FileEntry], header: str = "") -> str:
    """A variants file (the format `load_variants_file` reads) holding `entries` in order.

    header: comment text put first, one '# ' line per line of it.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for entry in entries:
        lines += ["", "[[variant]]", f"name = {json.dumps(entry.name)}"]
        lines.append(f"description = {json.dumps(entry.description)}")
        if entry.base != "reference":
            lines.append(f"base = {json.dumps(entry.base)}")
        lines += [f"{key} = {_toml_value(value)}" for key, value in entry.changes.items()]
    return "\n".join(lines).lstrip("\n") + "\n"
