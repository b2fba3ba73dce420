"""Ablation of one variant against a reference, from their specs alone (pure functions, no I/O).

A variant differs from the reference in a few fields. `difference_groups` splits those fields into
differences that move as one: the fields of one tuple of `spec.COUPLED_FIELDS` (settings that only
mean something together, such as initial_alpha with initial_log_alpha) form one difference, every other
differing field is a difference of its own. `ablation_plan` then builds, per difference, the
reference with that difference added and the variant with it removed (set back to the reference's
values): the first asks whether the difference moves the score on its own, the second whether the
variant needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .spec import COUPLED_FIELDS, VariantSpec, field_names

Role = Literal["added", "removed"]
ROLES: tuple[Role, ...] = ("added", "removed")
# The name of an added variant starts with its reference's short name (`ref-init-xavier`).
SHORT_NAMES = {"reference": "ref"}


class AblationError(ValueError):
    """Two specs that cannot be ablated (no difference, or an ablated spec is invalid); one line."""


@dataclass(frozen=True)
class Difference:
    """One difference of a variant from its reference: fields that move together.

    fields: spec field names, in the spec's field order.
    reference_values, variant_values: the values of `fields` in the reference and in the variant.
    """

    fields: tuple[str, ...]
    reference_values: tuple[Any, ...]
    variant_values: tuple[Any, ...]

    @property
    def key(self) -> str:
        """The fields joined by '+': what the attribution table names the difference by."""
        return "+".join(self.fields)

    def label(self) -> str:
        """`field=value` of the variant's side, comma-separated (e.g. 'init=xavier')."""
        return ", ".join(f"{f}={value_text(v, ',')}" for f, v in zip(self.fields, self.variant_values))


@dataclass(frozen=True)
class AblatedVariant:
    """One variant of an ablation: the reference with one difference added, or the variant with one removed."""

    name: str
    role: Role
    difference: Difference
    spec: VariantSpec
    description: str


def value_text(value: Any, joiner: str = "x") -> str:
    """A spec value as short text: tuples joined by `joiner`, None as 'none', floats in %g form."""
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return joiner.join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _group_of(name: str) -> tuple[str, ...]:
    return next((group for group in COUPLED_FIELDS if name in group), (name,))


def difference_groups(reference: VariantSpec, variant: VariantSpec) -> list[Difference]:
    """The differences of `variant` from `reference`, in the spec's field order of their first field.

    Coupled fields (`COUPLED_FIELDS`) that differ form one difference; a coupled field that does not
    differ is left out of it (moving it would change nothing).
    """
    changed = variant.differences(reference)
    order = field_names()
    out: list[Difference] = []
    seen: set[str] = set()
    for name in order:
        if name not in changed or name in seen:
            continue
        fields = tuple(f for f in order if f in _group_of(name) and f in changed)
        seen.update(fields)
        out.append(
            Difference(
                fields,
                tuple(getattr(reference, f) for f in fields),
                tuple(getattr(variant, f) for f in fields),
            )
        )
    return out


def _with(spec: VariantSpec, fields: tuple[str, ...], values: tuple[Any, ...], what: str) -> VariantSpec:
    try:
        return dataclasses.replace(spec, **dict(zip(fields, values)))
    except (TypeError, ValueError) as exc:
        raise AblationError(f"{what} is not a valid spec: {exc}") from None


def ablation_plan(
    reference_name: str,
    reference: VariantSpec,
    variant_name: str,
    variant: VariantSpec,
    known: Mapping[str, VariantSpec] | None = None,
) -> list[AblatedVariant]:
    """The ablated variants of `variant` against `reference`: per difference (`difference_groups`),
    first the reference with it added, then the variant with it removed.

    Names: an added variant is `<ref>-<field>-<value>` (`<ref>`: 'ref' for 'reference', else the
    reference's name), a removed one `<variant>-no-<field>`, coupled fields joined by '-'. A spec equal
    to one in `known` ({name: spec}, e.g. the runs already in a results folder) takes that name, so its
    runs are reused; two ablated specs that are equal (a variant with two differences: reference + one
    = variant - the other) share one name. Raises AblationError when the specs do not differ or an
    ablated spec is invalid (e.g. bf16 precision with one hidden layer).
    """
    groups = difference_groups(reference, variant)
    if not groups:
        raise AblationError(f"{variant_name} and {reference_name} have the same spec: nothing to ablate")
    prefix = SHORT_NAMES.get(reference_name, reference_name)
    names_by_spec: dict[VariantSpec, str] = {spec: name for name, spec in (known or {}).items()}
    candidates = []
    for group in groups:
        added = _with(reference, group.fields, group.variant_values, f"{reference_name} + {group.key}")
        removed = _with(variant, group.fields, group.reference_values, f"{variant_name} - {group.key}")
        candidates += [
            (
                "added",
                group,
                added,
                prefix + "".join(f"-{f}-{value_text(v)}" for f, v in zip(group.fields, group.variant_values)),
                f"{reference_name} with {variant_name}'s {group.label()}",
            ),
            (
                "removed",
                group,
                removed,
                f"{variant_name}-no-{'-'.join(group.fields)}",
                f"{variant_name} with {reference_name}'s "
                + ", ".join(f"{f}={value_text(v, ',')}" for f, v in zip(group.fields, group.reference_values)),
            ),
        ]
    # Added specs are named first: where one is also a removed one, the name says what it holds.
    for role in ROLES:
        for r, _, spec, name, _ in candidates:
            if r == role:
                names_by_spec.setdefault(spec, name)
    return [
        AblatedVariant(names_by_spec[spec], role, group, spec, description)
        for role, group, spec, _, description in candidates
    ]
