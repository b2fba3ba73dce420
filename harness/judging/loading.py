"""Reading run records: every run folder of a results folder into frames, skipping what cannot be trusted.

The files and their schema are results/README.md's; `harness.records` writes them. A run folder that
is unfinished (no status.json) or corrupt (a file missing, half-written or inconsistent with its folder)
is skipped with a line saying why, never read as a score. Nothing here imports a learner or torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from variants.catalog import CATALOG

from ..records import EVAL_COLUMNS, STATES, check_run
from . import normalization

RUN_COLUMNS = ("env", "variant", "seed", "state", "final_return", "auc_return", "env_steps", "wall_s", "reason")
# The diagnostics the report plots; a diagnostics.csv lacking any of them is treated as corrupt.
PLOTTED_DIAGNOSTICS = ("alpha", "entropy", "q_mean", "critic_loss", "saturation_fraction", "log_prob_gap")
DIAGNOSTICS_REQUIRED = ("env_step", "updates", *PLOTTED_DIAGNOSTICS)


class CorruptRecord(ValueError):
    """A run folder whose files are missing, unreadable or inconsistent."""


class UnfinishedRun(CorruptRecord):
    """A run folder without status.json: a run still going, or stopped before it finished."""


@dataclass(frozen=True)
class RunRecords:
    """Everything read from one results folder; see results/README.md for the files.

    runs: one row per readable run, columns `RUN_COLUMNS` + `path` (the run folder, relative to the
        results folder), ordered by env, variant (catalog order) and seed.
    eval_curves: one row per evaluation: env, variant, seed, env_step, return_mean, return_std, episodes.
    diagnostics: one row per diagnostics interval: env, variant, seed, env_step, updates and every
        column of the run's diagnostics.csv.
    configs: config.json of each run, keyed by (env, variant, seed).
    warnings: one line per run folder that was skipped as unreadable or inconsistent, naming it and why.
    unfinished: the run folders (relative to the results folder) skipped for having no status.json yet:
        runs still going (a live report) or stopped before they finished (a rerun resumes them).
    folders: each readable run's folder as found on disk (results folder joined with `path`), keyed by
        (env, variant, seed): where a reader of a run's other files (train.csv) opens it.
    """

    runs: pd.DataFrame
    eval_curves: pd.DataFrame
    diagnostics: pd.DataFrame
    configs: dict[tuple[str, str, int], dict]
    warnings: list[str]
    unfinished: list[str] = field(default_factory=list)
    folders: dict[tuple[str, str, int], Path] = field(default_factory=dict)

    def skipped(self) -> list[str]:
        """One line per skipped run folder, unfinished and unreadable alike."""
        return [*(f"skipped {rel}: no status.json (unfinished run)" for rel in self.unfinished), *self.warnings]

    def unfinished_variants(self) -> list[str]:
        """The variant of each unfinished run folder (runs/<env>/<variant>/seed_<k>), in `unfinished`'s order."""
        return [Path(u).parts[-2] for u in self.unfinished]

    def only(self, variants: Collection[str]) -> RunRecords:
        """These records with only the runs of `variants`: unfinished folders of other variants are
        dropped too, unreadable ones stay listed (their variant cannot be trusted)."""
        keep = set(variants)

        def rows(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[frame["variant"].isin(keep)].reset_index(drop=True)

        return RunRecords(
            rows(self.runs),
            rows(self.eval_curves),
            rows(self.diagnostics),
            {k: v for k, v in self.configs.items() if k[1] in keep},
            self.warnings,
            [u for u, v in zip(self.unfinished, self.unfinished_variants()) if v in keep],
            {k: v for k, v in self.folders.items() if k[1] in keep},
        )


def find_run_folders(results_dir: Path) -> list[Path]:
    """The `runs/<env>/<variant>/seed_*` folders under `results_dir`, sorted by path."""
    return sorted(p for p in Path(results_dir).glob("runs/*/*/seed_*") if p.is_dir())


def scan_results(results_dir: Path) -> RunRecords:
    """Read every run folder of `results_dir`, skipping (with a warning) the ones that cannot be trusted.

    runs.csv is not read: the run folders are the source of truth. A folder is skipped when it lacks
    status.json (the run is unfinished), when config.json or status.json is not valid JSON of the
    documented shape, or when eval.csv or diagnostics.csv is missing, cannot be parsed, or lacks a
    documented column or value (a half-written file).
    """
    results_dir = Path(results_dir)
    rows: list[dict] = []
    curves: list[pd.DataFrame] = []
    diagnostics: list[pd.DataFrame] = []
    configs: dict[tuple[str, str, int], dict] = {}
    folders: dict[tuple[str, str, int], Path] = {}
    warnings: list[str] = []
    unfinished: list[str] = []
    for folder in find_run_folders(results_dir):
        rel = folder.relative_to(results_dir).as_posix()
        try:
            row, config, curve, diag = _read_run_folder(folder)
        except UnfinishedRun:
            unfinished.append(rel)
            continue
        except CorruptRecord as exc:
            warnings.append(f"skipped {rel}: {exc}")
            continue
        row["path"] = rel
        rows.append(row)
        key = (row["env"], row["variant"], row["seed"])
        configs[key] = config
        folders[key] = folder
        curves.append(curve.assign(env=row["env"], variant=row["variant"], seed=row["seed"]))
        diagnostics.append(diag.assign(env=row["env"], variant=row["variant"], seed=row["seed"]))

    runs = pd.DataFrame(rows, columns=[*RUN_COLUMNS, "path"])
    runs = runs.astype(
        {"seed": "int64", "final_return": "float64", "auc_return": "float64", "env_steps": "int64", "wall_s": "float64"}
    )
    runs = sort_runs(runs)
    key_columns = ["env", "variant", "seed"]
    eval_curves = _concat(curves, [*key_columns, *EVAL_COLUMNS])
    diag_frame = _concat(diagnostics, [*key_columns, *DIAGNOSTICS_REQUIRED])
    diag_frame = diag_frame[key_columns + [c for c in diag_frame.columns if c not in key_columns]]
    return RunRecords(runs, eval_curves, diag_frame, configs, warnings, unfinished, folders)


class DuplicateRun(ValueError):
    """The same (env, variant, seed) run found in two of the results folders read together."""


def scan_many(results_dirs: Sequence[Path], variants: Collection[str] | None = None) -> RunRecords:
    """`scan_results` of several folders read as one (a study beside the campaign whose reference it
    pairs with), keeping only `variants` when given (None: every variant found).

    With more than one folder each run's `path` (and each skipped folder's line) starts with the
    results folder it came from. Raises DuplicateRun when two folders hold the same (env, variant,
    seed): which of the two records to judge is not for the report to guess.
    """
    dirs = [Path(d) for d in results_dirs]
    parts = [scan_results(d) for d in dirs]
    if len(parts) == 1:
        merged = parts[0]
    else:
        runs = _concat(
            [r.runs.assign(path=[(d / p).as_posix() for p in r.runs["path"]]) for d, r in zip(dirs, parts)],
            [*RUN_COLUMNS, "path"],
        )
        key_columns = ["env", "variant", "seed"]
        twice = runs.duplicated(key_columns, keep=False)
        if twice.any():
            first = runs[twice].iloc[0]
            same = (runs[key_columns] == first[key_columns]).all(axis=1)
            raise DuplicateRun(
                f"{first['env']} / {first['variant']} / seed {first['seed']} is recorded twice: "
                + ", ".join(runs.loc[same, "path"])
            )
        configs: dict[tuple[str, str, int], dict] = {}
        folders: dict[tuple[str, str, int], Path] = {}
        for r in parts:
            configs.update(r.configs)
            folders.update(r.folders)
        merged = RunRecords(
            sort_runs(runs),
            _concat([r.eval_curves for r in parts], [*key_columns, *EVAL_COLUMNS]),
            _concat([r.diagnostics for r in parts], [*key_columns, *DIAGNOSTICS_REQUIRED]),
            configs,
            [w.replace("skipped ", f"skipped {d.as_posix()}/", 1) for d, r in zip(dirs, parts) for w in r.warnings],
            [(d / u).as_posix() for d, r in zip(dirs, parts) for u in r.unfinished],
            folders,
        )
    return merged if variants is None else merged.only(variants)


def load_runs(results_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """One row per readable run (columns `RUN_COLUMNS` + `path`) and the warnings of skipped folders."""
    found = scan_results(results_dir)
    return found.runs, found.skipped()


def load_eval_curves(results_dir: Path) -> pd.DataFrame:
    """Every evaluation of every readable run: env, variant, seed, env_step, return_mean, return_std, episodes."""
    return scan_results(results_dir).eval_curves


def load_diagnostics(results_dir: Path) -> pd.DataFrame:
    """Every diagnostics row of every readable run: env, variant, seed, env_step, updates, diagnostics..."""
    return scan_results(results_dir).diagnostics


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]  # concat of empty frames is deprecated in pandas
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("env", "variant") else "float64") for c in columns})
    return pd.concat(frames, ignore_index=True)


def _read_run_folder(folder: Path) -> tuple[dict, dict, pd.DataFrame, pd.DataFrame]:
    """(runs row, config, eval curve, diagnostics) of one run folder; raises CorruptRecord."""
    env, variant, seed_name = folder.parts[-3], folder.parts[-2], folder.name
    try:
        seed = int(seed_name.removeprefix("seed_"))
    except ValueError:
        raise CorruptRecord(f"folder name {seed_name!r} is not seed_<integer>") from None
    if not (folder / "status.json").is_file():
        raise UnfinishedRun("no status.json (unfinished run)")
    status = _read_json_object(folder / "status.json")
    config = _read_json_object(folder / "config.json")

    state = status.get("state")
    if state not in STATES:
        raise CorruptRecord(f"status.json: state {state!r} is not one of {', '.join(STATES)}")
    for key in ("env_steps", "wall_s"):
        if not isinstance(status.get(key), (int, float)) or isinstance(status.get(key), bool):
            raise CorruptRecord(f"status.json: {key} is not a number")
    if not isinstance(config.get("spec"), dict):
        raise CorruptRecord("config.json: no spec object")
    for key, expected in (("env", env), ("variant", variant), ("seed", seed)):
        if config.get(key) != expected:
            raise CorruptRecord(f"config.json says {key}={config.get(key)!r}, the folder says {expected!r}")

    curve = _read_csv_checked(folder / "eval.csv", EVAL_COLUMNS)
    diag = _read_csv_checked(folder / "diagnostics.csv", DIAGNOSTICS_REQUIRED)
    problem = check_run(folder).problem  # status.json, config.json and eval.csv must agree
    if problem:
        raise CorruptRecord(problem)
    row = {
        "env": env,
        "variant": variant,
        "seed": seed,
        "state": state,
        "final_return": _finite_or_nan(status.get("final_return")),
        "auc_return": _finite_or_nan(status.get("auc_return")),
        "env_steps": int(status["env_steps"]),
        "wall_s": float(status["wall_s"]),
        "reason": failure_reason(status),
    }
    if state == "complete" and (math.isnan(row["final_return"]) or math.isnan(row["auc_return"])):
        raise CorruptRecord("status.json: a complete run without final_return/auc_return")
    return row, config, curve, diag


def _read_json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptRecord(f"no {path.name}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptRecord(f"{path.name} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(f"{path.name} is not a JSON object")
    return data


def _read_csv_checked(path: Path, required: Sequence[str]) -> pd.DataFrame:
    """Read a run CSV; every `required` column must exist and be numeric, and the first and last
    required columns complete in every row (a truncated last line leaves them empty)."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise CorruptRecord(f"no {path.name}") from None
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise CorruptRecord(f"{path.name} cannot be parsed ({str(exc).strip().splitlines()[0]})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise CorruptRecord(f"{path.name} lacks column(s) {', '.join(missing)}")
    if frame.empty:
        return frame.astype({c: "float64" for c in required})
    for column in required:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise CorruptRecord(f"{path.name}: column {column} holds non-numbers")
    last_column = frame.columns[-1]
    for column in (required[0], last_column):
        if frame[column].isna().any():
            raise CorruptRecord(f"{path.name}: empty {column} (half-written row?)")
    return frame


def _finite_or_nan(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return math.nan


def run_budget(config: Mapping[str, object]) -> dict:
    """A run's budget from its config.json (steps, evaluation schedule and episodes), without the name
    of the profile it came from: two runs of equal budgets are comparable whatever profile named them."""
    budget = config.get("budget") or {}
    return {k: v for k, v in budget.items() if k != "profile"}


def failure_reason(status: Mapping[str, object]) -> str:
    """One line saying why a run did not complete ('' for a complete run)."""
    if status.get("state") == "complete":
        return ""
    error = str(status.get("error") or "no error recorded").strip()
    first_line = error.splitlines()[0] if error else "no error recorded"
    if len(first_line) > 200:
        first_line = first_line[:197] + "..."
    step = status.get("error_step")
    return f"{first_line} (at step {step})" if step is not None else first_line


# --- ordering: the benchmark's environments, then the catalog's variants, then seeds ---------------


def env_order(envs: Sequence[str]) -> list[str]:
    """Distinct `envs`: the benchmark's environments in their usual order, then the rest sorted."""
    known = list(normalization.R_TARGET)
    distinct = set(envs)
    return [e for e in known if e in distinct] + sorted(distinct - set(known))


def variant_order(variants: Sequence[str]) -> list[str]:
    """Distinct `variants`: catalog order first (so colours and rows agree across reports), then the rest sorted."""
    known = list(CATALOG)
    distinct = set(variants)
    return [v for v in known if v in distinct] + sorted(distinct - set(known))


def sort_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` ordered by env (`env_order`), variant (`variant_order`) and seed, on a fresh index."""
    envs = {e: i for i, e in enumerate(env_order(runs["env"].tolist()))}
    variants = {v: i for i, v in enumerate(variant_order(runs["variant"].tolist()))}
    key = pd.DataFrame({"e": runs["env"].map(envs), "v": runs["variant"].map(variants), "s": runs["seed"]})
    return runs.loc[key.sort_values(["e", "v", "s"], kind="stable").index].reset_index(drop=True)
