"""An ablation grid on disk: what `python -m harness ablate` writes into its results folder, and how a
report finds each run's role in it again.

The command writes two data files beside `runs/` (never code; nothing in them is evaluated):

    ablation.toml   the ablated variants as a variants file (variants.userfile's format), run as a grid
    ablation.json   the manifest: the reference's and the variant's names and specs, and the name of
                    each ablated variant with its role ('added' or 'removed') and fields

A report reads the manifest's two specs, rebuilds the ablation from them (`variants.ablation`) and
matches each ablated spec against the specs the runs recorded (config.json), so runs of the same spec
in another folder read with it (`report A B`) take their role too. Shared by `harness.cli` (writes) and
`harness.judging.attribution` (reads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from variants.ablation import AblatedVariant, Difference, Role, ablation_plan
from variants.catalog import CATALOG, CatalogEntry
from variants.spec import VariantSpec
from variants.userfile import FileEntry, variants_file_text

from . import records

MANIFEST_NAME = "ablation.json"
VARIANTS_FILE_NAME = "ablation.toml"


class ManifestError(ValueError):
    """An ablation.json that cannot be read as a manifest; the message is one line."""


@dataclass(frozen=True)
class Manifest:
    """The two ends of an ablation and the names its grid gave the ablated variants.

    names: {(role, difference key): variant name} as the command wrote them.
    """

    reference_name: str
    reference: VariantSpec
    variant_name: str
    variant: VariantSpec
    names: Mapping[tuple[str, str], str]

    def plan(self) -> list[AblatedVariant]:
        return ablation_plan(self.reference_name, self.reference, self.variant_name, self.variant)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": {"name": self.reference_name, "spec": self.reference.to_dict()},
            "variant": {"name": self.variant_name, "spec": self.variant.to_dict()},
            "ablated": [{"role": r, "difference": k, "name": n} for (r, k), n in self.names.items()],
        }


@dataclass(frozen=True)
class Comparison:
    """One row of an attribution: `variant` (an ablated variant) judged against `against` (an end).

    variant / against: the recorded variant names that hold these specs, None where none ran.
    """

    difference: Difference
    role: Role
    variant: str | None
    against: str | None


def recorded_specs(results_dir: Path) -> dict[str, VariantSpec]:
    """{variant name: spec} of the natively trained runs recorded under `results_dir` (any env); run
    folders whose config.json cannot be read are left out (the grid's planning reports them)."""
    out: dict[str, VariantSpec] = {}
    for path in sorted(Path(results_dir).glob("runs/*/*/seed_*/config.json")):
        try:
            config = records.read_json(path)
            if config.get("implementation", "native") == "native":
                out.setdefault(str(config["variant"]), VariantSpec.from_dict(records.recorded_spec(config)))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def file_entries(
    plan: Sequence[AblatedVariant], ends: Mapping[str, VariantSpec], catalog: Mapping[str, CatalogEntry] = CATALOG
) -> list[FileEntry]:
    """The variants file entries an ablation grid needs beyond the catalog: each end that is not a
    catalog entry of the same spec, then each ablated variant once. An entry starts from the catalog
    entry of its end where there is one (`base`), so it lists only the fields it changes."""
    entries: dict[str, FileEntry] = {}

    def base_of(name: str, spec: VariantSpec) -> str:
        entry = catalog.get(name)
        return name if entry is not None and entry.spec == spec and entry.implementation == "native" else "reference"

    for name, spec in ends.items():
        if base_of(name, spec) != name:
            entries[name] = FileEntry(
                name, f"{name} (from its spec)", "reference", _changes(spec, "reference", catalog)
            )
    reference_name, variant_name = list(ends)
    for item in plan:
        if item.name in entries or item.name in catalog:
            continue
        end = reference_name if item.role == "added" else variant_name
        base = base_of(end, ends[end])
        entries[item.name] = FileEntry(item.name, item.description, base, _changes(item.spec, base, catalog))
    return list(entries.values())


def _changes(spec: VariantSpec, base: str, catalog: Mapping[str, CatalogEntry]) -> dict[str, Any]:
    return {k: v[0] for k, v in spec.differences(catalog[base].spec).items()}


def write_ablation(out: Path, manifest: Manifest, entries: Sequence[FileEntry], command: str) -> Path:
    """Write ablation.toml and ablation.json into `out` (atomically); returns the variants file's path."""
    path = Path(out) / MANIFEST_NAME
    header = (
        f"The ablation of {manifest.variant_name} against {manifest.reference_name}, written by\n"
        f"  {command}\nwhich trains these variants, with the two ends unless --ends-from holds their runs, "
        f"as one grid;\n{MANIFEST_NAME} beside it records the two specs the report's attribution starts from."
    )
    toml_path = Path(out) / VARIANTS_FILE_NAME
    records.atomic_write_text(toml_path, variants_file_text(entries, header))
    records.write_json(path, manifest.to_dict())
    return toml_path


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of `folder`, None when it has none; raises ManifestError (one line) when unreadable."""
    path = Path(folder) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        data = records.read_json(path)
        names = {(str(a["role"]), str(a["difference"])): str(a["name"]) for a in data.get("ablated", [])}
        return Manifest(
            str(data["reference"]["name"]),
            VariantSpec.from_dict(data["reference"]["spec"]),
            str(data["variant"]["name"]),
            VariantSpec.from_dict(data["variant"]["spec"]),
            names,
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ManifestError(f"{path} is not an ablation manifest ({exc})") from None


def comparisons(manifest: Manifest, specs: Mapping[str, VariantSpec]) -> list[Comparison]:
    """The attribution's comparisons, given the specs recorded in one env ({variant name: spec}).

    Each spec of the ablation (ends included) is matched to the recorded names holding it, the
    manifest's name preferred where several do (a catalog name and an ablated one, say).
    """
    by_spec: dict[VariantSpec, list[str]] = {}
    for name, spec in specs.items():
        by_spec.setdefault(spec, []).append(name)

    def name_of(spec: VariantSpec, preferred: str | None) -> str | None:
        names = by_spec.get(spec, [])
        return preferred if preferred in names else (names[0] if names else None)

    reference = name_of(manifest.reference, manifest.reference_name)
    variant = name_of(manifest.variant, manifest.variant_name)
    out = []
    for item in manifest.plan():
        preferred = manifest.names.get((item.role, item.difference.key))
        against = reference if item.role == "added" else variant
        out.append(Comparison(item.difference, item.role, name_of(item.spec, preferred), against))
    return out


def prepare_grid(
    out: Path,
    ends: Mapping[str, VariantSpec],
    command: str,
    catalog: Mapping[str, CatalogEntry] = CATALOG,
    files_dir: Path | None = None,
) -> tuple[list[str], Path]:
    """Plan the ablation of the second of `ends` ({name: spec}: reference, then variant) against the
    first, write its variants file and manifest into `out`, and return the names to run (the two ends
    first, each name once) with the variants file's path.

    An ablated spec equal to one already recorded in `out` takes that run's name, so a rerun, or a
    study begun by hand, resumes rather than retrains. `files_dir`: where to write the two files
    instead of `out` (a dry run leaves `out` as it was). Raises AblationError (variants.ablation) or
    ManifestError, one line each.
    """
    (reference_name, reference), (variant_name, variant) = ends.items()
    old = read_manifest(Path(out))
    if old is not None and (old.reference, old.variant) != (reference, variant):
        raise ManifestError(
            f"{Path(out) / MANIFEST_NAME} records the ablation of {old.variant_name} against "
            f"{old.reference_name} (other specs); an ablation of other specs needs its own --out"
        )
    known = {n: s for n, s in recorded_specs(out).items() if n not in ends}
    plan = ablation_plan(reference_name, reference, variant_name, variant, known)
    names = {(item.role, item.difference.key): item.name for item in plan}
    manifest = Manifest(reference_name, reference, variant_name, variant, names)
    path = write_ablation(files_dir or out, manifest, file_entries(plan, ends, catalog), command)
    return list(dict.fromkeys([reference_name, variant_name, *names.values()])), path
