"""The attribution table of an ablation grid (`python -m harness ablate`): which of a variant's
differences from the reference move the score on their own, and which the variant needs.

Per environment and difference, two comparisons of the final return (normalized where the env has
constants), paired by seed like the report's verdicts (`inference.compare_by_seed`):

    added     reference + the difference  vs  reference   (does it move the score on its own?)
    removed   variant - the difference    vs  variant     (does the variant need it?)

All rows of the table are one family, held at family-wise level `inference.ALPHA` by Bonferroni
intervals (`inference.decide`): a second family beside the report's verdict table, at the same level.
Roles come from run records only: the results folders' ablation manifest (`harness.ablation`) and the
specs the runs recorded.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from variants.spec import VariantSpec

from .. import ablation, records
from . import findings, inference, loading, looks, normalization, sequential, stats

METRIC = "final_return"
ATTRIBUTION_COLUMNS = (
    "env",
    "difference",
    "change",
    "role",
    "variant",
    "against",
    "units",
    "verdict",
    "reading",
    "estimate",
    "ci_low",
    "ci_high",
    "mdd",
    "paired",
    "n_pairs",
    "n_runs",
    "n_against_runs",
    "family_size",
    "level",
)
NOT_RUN = "not run"
# What a verdict says about the difference, per role (a 'no detectable difference' reads as open).
READINGS: dict[tuple[str, str], str] = {
    ("added", inference.BETTER): "raises the score on its own",
    ("added", inference.WORSE): "lowers the score on its own",
    ("added", inference.EQUIVALENT): "no effect on its own",
    ("removed", inference.WORSE): "needed: removing it lowers the score",
    ("removed", inference.BETTER): "harmful: removing it raises the score",
    ("removed", inference.EQUIVALENT): "not needed",
}


def find_manifest(sources: Sequence[Path]) -> ablation.Manifest | None:
    """The first ablation manifest among the results folders read; None when none has one."""
    for folder in sources:
        manifest = ablation.read_manifest(Path(folder))
        if manifest is not None:
            return manifest
    return None


def _env_specs(configs: Mapping[tuple[str, str, int], dict], env: str) -> dict[str, VariantSpec]:
    out: dict[str, VariantSpec] = {}
    for (run_env, variant, _), config in configs.items():
        if run_env != env or variant in out or config.get("implementation", "native") != "native":
            continue
        try:
            out[variant] = VariantSpec.from_dict(records.recorded_spec(config))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def attribution_table(
    manifest: ablation.Manifest,
    runs: pd.DataFrame,
    configs: Mapping[tuple[str, str, int], dict],
    scores: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The attribution rows (`ATTRIBUTION_COLUMNS`), per env in the runs' order, then per difference.

    runs: the report's scored runs (`stats.scored_runs`); configs: config.json per (env, variant, seed);
    scores: the runs' `stats.seed_scores` (computed here when None), read in normalized score where the
    env has constants.
    A side with fewer than `stats.MIN_RUNS_FOR_VERDICT` counted runs gets 'too few runs'; a spec that
    no run recorded, 'not run'. estimate: mean (paired: per-seed) difference of the compared variant
    minus the end it is compared with; ci_low/ci_high: its simultaneous interval; mdd: the difference
    the rows would detect with 80% power at the family's level.
    """
    scores = stats.seed_scores(runs) if scores is None else scores
    cells = []
    for env in loading.env_order(runs["env"].tolist()):
        for comparison in ablation.comparisons(manifest, _env_specs(configs, env)):
            x = stats.cell_scores(scores, env, comparison.variant, METRIC)
            y = stats.cell_scores(scores, env, comparison.against, METRIC)
            cell = {"env": env, "comparison": comparison, "n_runs": len(x), "n_against_runs": len(y)}
            if comparison.variant is None or comparison.against is None:
                cell["verdict"] = NOT_RUN
            elif min(len(x), len(y)) < stats.MIN_RUNS_FOR_VERDICT:
                cell["verdict"] = stats.TOO_FEW_RUNS
            else:
                cell["test"] = inference.compare_by_seed(x, y)
            cells.append(cell)
    tests = [c["test"] for c in cells if "test" in c]
    # One family; the margin only applies where the units are normalized (raw returns have no scale).
    with_margin = iter(inference.decide(tests, margin=inference.EQUIVALENCE_MARGIN))
    without = iter(inference.decide(tests, margin=None))
    level = inference.family_level(len(tests))
    rows = []
    for cell in cells:
        comparison, test = cell["comparison"], cell.get("test")
        normalized = normalization.can_normalize(cell["env"])
        decision = None
        if test is not None:
            decision, raw = next(with_margin), next(without)
            decision = decision if normalized else raw
        verdict = decision.verdict if decision else cell["verdict"]
        rows.append(
            {
                "env": cell["env"],
                "difference": comparison.difference.key,
                "change": comparison.difference.label(),
                "role": comparison.role,
                "variant": comparison.variant or "",
                "against": comparison.against or "",
                "units": "normalized" if normalized else "return",
                "verdict": verdict,
                "reading": READINGS.get((comparison.role, verdict), "open" if decision else ""),
                "estimate": test.difference if test else math.nan,
                "ci_low": decision.low if decision else math.nan,
                "ci_high": decision.high if decision else math.nan,
                "mdd": decision.mdd if decision else math.nan,
                "paired": bool(test.paired) if test else False,
                "n_pairs": test.n_x if test is not None and test.paired else 0,
                "n_runs": cell["n_runs"],
                "n_against_runs": cell["n_against_runs"],
                "family_size": len(tests),
                "level": level,
            }
        )
    return pd.DataFrame(rows, columns=list(ATTRIBUTION_COLUMNS))


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


QUESTIONS = {
    "added": "on its own: {reference} + it vs {reference}",
    "removed": "needed: {variant} - it vs {variant}",
}


def _interval_text(row: pd.Series) -> str:
    if row["estimate"] != row["estimate"]:
        return ""
    text = findings.interval_text(row["estimate"], row["ci_low"], row["ci_high"])
    if row["verdict"] == inference.NO_DIFFERENCE and row["mdd"] == row["mdd"]:
        d = findings.interval_decimals(row["ci_low"], row["ci_high"])
        text += f"; could miss up to {row['mdd']:.{d}f}"
    return text


def _seeds_text(row: pd.Series) -> str:
    if row["paired"]:
        return f"{int(row['n_pairs'])} paired"
    return f"{int(row['n_runs'])} vs {int(row['n_against_runs'])}"


SEQUENTIAL_CAVEAT = (
    "These runs' seed counts were chosen by a sequential grid's looks, which judged each variant against "
    "{reference}, not these comparisons, so the family's stated level does not hold for them; a fixed "
    "--seeds grid gives a table at its level."
)
FROM_LOOKS = (
    "Verdicts, intervals and seeds are the sequential grid's (its looks judged these comparisons and the "
    "variant against {reference}, looks.csv): family-wise error {alpha:g} per metric over all its looks and "
    "comparisons; an open row's interval says how large a difference its seeds leave possible."
)


def from_looks(table: pd.DataFrame, state: looks.Looks) -> tuple[pd.DataFrame, bool]:
    """`table` with every row a sequential grid's looks judged (same env, variant and compared variant,
    on `METRIC`) taken from them: verdict, estimate and interval, seeds; mdd NaN, level NaN, family_size
    the looks' comparisons; `table` as it was (and False) unless the looks judged every row that ran.
    Returns the table and whether it came from the looks."""
    judged = {(c.env, c.variant, c.against): c for c in looks.comparisons(state) if c.metric == METRIC}
    keys = zip(table["env"], table["variant"], table["against"], table["verdict"])
    if any(verdict != NOT_RUN and (env, variant, against) not in judged for env, variant, against, verdict in keys):
        return table, False
    out = table.copy()
    for i, row in out.iterrows():
        c = judged.get((row["env"], row["variant"], row["against"]))
        if c is None:
            continue
        verdict = inference.NO_DIFFERENCE if c.verdict == sequential.OPEN else c.verdict
        reading = READINGS.get((row["role"], verdict), "open")
        values = (verdict, reading, c.difference, c.low, c.high, math.nan, True, c.seeds, len(state.compared), math.nan)
        columns = ["verdict", "reading", "estimate", "ci_low", "ci_high", "mdd", "paired", "n_pairs"]
        out.loc[i, [*columns, "family_size", "level"]] = values
    return out, True


def section_html(
    table: pd.DataFrame,
    manifest: ablation.Manifest,
    classes: Mapping[str, str],
    looked: bool = False,
    judged: bool = False,
    alpha: float = inference.ALPHA,
) -> str:
    """The report's attribution section: one table per env. `classes`: {verdict: CSS class}. `looked`:
    the runs came from a sequential grid; `judged`: its looks (of family-wise error `alpha`) judged every
    row (`from_looks`: `FROM_LOOKS` is said), else `SEQUENTIAL_CAVEAT`."""
    reference, variant = manifest.reference_name, manifest.variant_name
    family = int(table["family_size"].max()) if not table.empty else 0
    if judged:
        family_text = esc(FROM_LOOKS.format(reference=reference, alpha=alpha)) + " "
    elif family:
        family_text = (
            f"the {family} comparisons of this table, Bonferroni at level 1 - 0.05/{family} each, so the chance "
            "that any row says better or worse when nothing differs is at most 5% (a family of its own beside "
            "the verdict table). "
        )
    else:
        family_text = f"none yet: no row has the {stats.MIN_RUNS_FOR_VERDICT} runs a side that a verdict needs. "
    out = [
        f"<h2>Attribution: which of <code>{esc(variant)}</code>'s differences from <code>{esc(reference)}</code> "
        "matter</h2>",
        "<p>Each difference (coupled fields move as one: <code>variants.spec.COUPLED_FIELDS</code>) is judged "
        f"twice on the final return: <em>on its own</em>, {esc(reference)} with it added against "
        f"{esc(reference)}; <em>needed</em>, {esc(variant)} with it removed against {esc(variant)} (worse there "
        "means the variant needs it). Estimate: the mean per-seed difference with its simultaneous interval, "
        "in normalized score where the env has constants. <strong>Family:</strong> "
        + family_text
        + 'Table: <a href="attribution.csv">attribution.csv</a>.</p>',
    ]
    if looked and not judged:
        out.append(f'<p class="warn">{esc(SEQUENTIAL_CAVEAT.format(reference=reference))}</p>')
    header = ("difference", "question", "compared", "verdict", "estimate [interval]", "seeds", "reading")
    for env, rows in table.groupby("env", sort=False):
        out.append(f"<h3>{esc(env)}</h3><table><thead><tr>")
        out.append("".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead><tbody>")
        for _, row in rows.iterrows():
            question = QUESTIONS[row["role"]].format(reference=reference, variant=variant)
            cells = [
                f"<td><code>{esc(row['change'])}</code></td>",
                f"<td>{esc(question)}</td>",
                f"<td>{esc(row['variant'] or NOT_RUN)} vs {esc(row['against'] or NOT_RUN)}</td>",
                f'<td class="{classes.get(row["verdict"], "other")}">{esc(row["verdict"])}</td>',
                f"<td>{esc(_interval_text(row))}</td>",
                f"<td>{esc(_seeds_text(row))}</td>",
                f"<td>{esc(row['reading'])}</td>",
            ]
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def markdown_table(
    table: pd.DataFrame,
    manifest: ablation.Manifest,
    looked: bool = False,
    judged: bool = False,
    alpha: float = inference.ALPHA,
) -> str:
    """The attribution as Markdown, one table per env, for a README (`looked`, `judged`, `alpha`: as
    `section_html`)."""
    lines = [f"Attribution of {manifest.variant_name} against {manifest.reference_name} (final return):", ""]
    if judged:
        lines += [FROM_LOOKS.format(reference=manifest.reference_name, alpha=alpha), ""]
    elif looked:
        lines += [SEQUENTIAL_CAVEAT.format(reference=manifest.reference_name), ""]
    for env, rows in table.groupby("env", sort=False):
        lines += [
            f"**{env}**",
            "",
            "| difference | question | verdict | estimate [interval] | seeds |",
            "|---|---|---|---|---|",
        ]
        for _, row in rows.iterrows():
            question = "on its own" if row["role"] == "added" else "needed"
            lines.append(
                f"| `{row['change']}` | {question} | {row['verdict']} | {_interval_text(row)} | {_seeds_text(row)} |"
            )
        lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class Attribution:
    """What a report adds for an ablation grid: the table, its HTML section and its Markdown."""

    table: pd.DataFrame
    html: str
    markdown: str


def for_report(
    sources: Sequence[Path],
    runs: pd.DataFrame,
    configs: Mapping[tuple[str, str, int], dict],
    classes: Mapping[str, str],
    scores: pd.DataFrame | None = None,
) -> Attribution | None:
    """The attribution of the results folders read, None when none holds an ablation manifest. An
    unreadable manifest gives a section that says so (the rest of the report stands)."""
    try:
        manifest = find_manifest(sources)
    except ablation.ManifestError as exc:
        text = f'<h2>Attribution</h2><p class="warn">Not made: {esc(exc)}</p>\n'
        return Attribution(pd.DataFrame(columns=list(ATTRIBUTION_COLUMNS)), text, f"Attribution not made: {exc}\n")
    if manifest is None:
        return None
    table = attribution_table(manifest, runs, configs, scores)
    state = _looks_of(sources)
    looked = state is not None or any(looks.looks_path(Path(source)).exists() for source in sources)
    judged, alpha = False, inference.ALPHA
    if state is not None:
        table, judged = from_looks(table, state)
        alpha = state.rule_design.alpha
    return Attribution(
        table,
        section_html(table, manifest, classes, looked, judged, alpha),
        markdown_table(table, manifest, looked, judged, alpha),
    )


def _looks_of(sources: Sequence[Path]) -> looks.Looks | None:
    """The looks recorded in the first of `sources` holding looks.json, None where none does or it cannot
    be read (the report's sequential section says why)."""
    for source in sources:
        try:
            state = looks.read_looks(Path(source))
        except looks.LooksError:
            return None
        if state is not None:
            return state
    return None
