"""The report's verdicts as Markdown tables (`findings.md`), one per environment, for a README.

It reads the frames the report already computed (`stats.summary_table`, `stats.verdict_table` and the
scored runs), so every figure in it is one the report's page shows. Per environment and variant: its
runs (and how many failed or diverged), the final-return IQM with its 95% bootstrap interval in raw
return, and its verdict against the reference on the final return and on auc_return with the
simultaneous interval, plus, where the rule cannot decide, the minimum detectable difference (MDD).
Where the results are a sequential grid's (`run --until-decided`), the verdict columns are the looks'
(`looks.comparisons`): the fixed rule's stated level does not hold on seed counts the looks chose.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import records
from . import loading, looks, sequential, stats


def _runs_cell(runs: pd.DataFrame, env: str, variant: str) -> str:
    """'5' or '5 (2 failed)' for the variant's runs in `env`."""
    count = int(((runs["env"] == env) & (runs["variant"] == variant)).sum())
    others = stats.not_complete_text(runs, variant, env)
    return f"{count}" + (f" ({others})" if others else "")


def _iqm_cell(summary: pd.DataFrame, env: str, variant: str) -> str:
    match = summary[
        (summary["env"] == env) & (summary["variant"] == variant) & (summary["metric"] == "final_return_iqm")
    ]
    if match.empty:
        return "-"
    r = match.iloc[0]
    return f"{r['estimate']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]"


def step_text(step: float) -> str:
    """An env_step as the tables write it: 40000 -> '40k', 12500 -> '12.5k', 800 -> '800'."""
    return f"{step / 1000:g}k" if step >= 1000 else f"{step:g}"


def reach_text(row: pd.Series | None) -> str:
    """'2/3 (median 60k; 40k-80k)': of a `stats.target_table` row, the runs that reached the target and
    the env_steps at which they first did; '-' without a row (no target for the environment)."""
    if row is None:
        return "-"
    text = f"{int(row['n_reached'])}/{int(row['n_runs'])}"
    if int(row["n_reached"]) == 1:
        return text + f" (at {step_text(row['first_step_median'])})"
    if int(row["n_reached"]) > 1:
        text += (
            f" (median {step_text(row['first_step_median'])}; {step_text(row['first_step_min'])}"
            f"-{step_text(row['first_step_max'])})"
        )
    return text


def _reach_cell(targets: pd.DataFrame, env: str, variant: str) -> str:
    match = targets[(targets["env"] == env) & (targets["variant"] == variant)]
    return reach_text(None if match.empty else match.iloc[0])


def decimals(half_width: float) -> int:
    """Decimals that show an interval of this half-width to two significant digits, 2 to 4 of them: 0.32 -> 2,
    0.0035 -> 3, 0.00031 -> 4; a zero-width interval (every difference equal) gets 4."""
    if not np.isfinite(half_width):
        return 2
    if half_width <= 1e-4:
        return 4
    return min(4, max(2, -int(np.floor(np.log10(half_width)))))


def verdict_cell(row: pd.Series | None) -> str:
    """'better: +0.69 [+0.49, +0.88]', or with '; MDD 0.82' where no difference is detectable."""
    if row is None:
        return "-"
    if np.isnan(row["difference"]):
        return str(row["verdict"])
    units = "" if row["units"] == "normalized" else " return"
    d = interval_decimals(row["ci_low"], row["ci_high"])
    text = f"{row['verdict']}: {row['difference']:+.{d}f}{units} [{row['ci_low']:+.{d}f}, {row['ci_high']:+.{d}f}]"
    if row["verdict"] == stats.NO_DIFFERENCE and not np.isnan(row["mdd"]):
        text += f"; MDD {row['mdd']:.{d}f}"
    return text


def interval_decimals(low: float, high: float) -> int:
    """`decimals` of the interval [low, high], raised (to at most 4) until neither bound that is not zero
    rounds to zero: such a bound would hide which side of zero the interval ends on."""
    d = decimals((high - low) / 2)
    while d < 4 and any(bound != 0 and round(bound, d) == 0 for bound in (low, high)):
        d += 1
    return d


def interval_text(difference: float, low: float, high: float) -> str:
    """'+0.44 [+0.08, +0.80]', or '+0.0004 [-0.0010, +0.0018]': decimals from `interval_decimals`."""
    d = interval_decimals(low, high)
    return f"{difference:+.{d}f} [{low:+.{d}f}, {high:+.{d}f}]"


def look_cell(c: looks.Comparison | None, end: str | None = None) -> str:
    """A sequential comparison as a findings cell: 'better at look 2 (10 seeds): +0.44 [+0.08, +0.80]',
    'worse at look 1 (5 seeds; every run failed)', 'open after look 1 (5 seeds): +0.02 [-0.55, +0.59]',
    'open at the maximum (20 seeds): ...' once the grid ended there (`end`, `Looks.end`), 'open, stopped
    for futility at look 2 (10 seeds; predictive power 3%): ...'; '-' without one."""
    if c is None:
        return "-"
    if c.basis == looks.FAILURE:
        return f"{c.verdict} at look {c.look} ({c.seeds} seeds; every run failed)"
    if c.stopped:
        head = (
            f"open, stopped for futility at look {c.look} ({c.seeds} seeds; predictive power {c.predictive_power:.0%})"
        )
    elif c.verdict == sequential.OPEN and end == looks.END_MAXIMUM:
        head = f"open at the maximum ({c.seeds} seeds)"
    elif c.verdict == sequential.OPEN:
        head = f"open after look {c.look} ({c.seeds} seeds)"
    else:
        head = f"{c.verdict} at look {c.look} ({c.seeds} seeds)"
    if np.isfinite(c.low) and np.isfinite(c.high):
        return f"{head}: {interval_text(c.difference, c.low, c.high)}"
    return head


def findings_markdown(
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    runs: pd.DataFrame,
    reference: str,
    targets: pd.DataFrame,
    looked: looks.Looks | None = None,
) -> str:
    """One Markdown table per environment of `runs` (in `loading.env_order`), rows in `loading.variant_order`.

    summary: `stats.summary_table` rows (env, variant, metric, estimate, ci_low, ci_high, n_runs).
    verdicts: `stats.verdict_table` rows of both return metrics.
    runs: the scored runs, one row per run (env, variant, seed, state, ...).
    targets: `stats.target_table` rows (env, variant, target, n_runs, n_reached, first_step_*).
    looked: the looks of the sequential grid that trained `runs`, judged against `reference`; its
        comparisons are the verdict columns (the module doc), the fixed rule's stay in verdicts.csv.
    """
    out = []
    family = verdicts.loc[verdicts["metric"] == "final_return", "family_size"]
    if looked is not None and not looked.looks:
        looked = None  # no look judged yet: the fixed rule's verdicts are all there is
    judged = {
        (c.env, c.variant, c.metric): c
        for c in (looks.comparisons(looked) if looked is not None else [])
        if c.against == looked.reference
    }
    if looked is not None:
        design = looked.rule_design
        out.append(
            f"Verdicts against `{reference}`: the looks of the sequential grid that trained these runs "
            f"(looks.csv; rule `{design.rule}`, looks every {design.look_every} seeds up to {design.max_seeds}), "
            f"family-wise error over every look and comparison at most {design.alpha:g} per metric; "
            f"differences in {'normalized score' if design.margin is not None else 'raw return'}. "
            "An open comparison's interval holds every difference its seeds "
            "could not rule out. The fixed rule's verdicts (verdicts.csv) are not shown: on seed counts the "
            "looks chose, their stated level does not hold.\n"
        )
    elif not family.empty and int(family.max()) == 0:
        out.append(
            f"No verdict yet: no variant has the {stats.MIN_RUNS_FOR_VERDICT} runs a side that the rule needs.\n"
        )
    elif not family.empty:
        n = int(family.max())
        out.append(
            f"Verdicts against `{reference}`: simultaneous intervals over a family of {n} "
            f"comparison{'s' if n != 1 else ''} per metric, family-wise level 5%; differences in normalized score where the "
            "environment has constants (raw return otherwise); MDD: the difference the runs could have "
            "missed (80% power).\n"
        )
    if not targets.empty:
        out.append(
            "Reached: how many runs had an evaluation (the mean return of its episodes) at or above the "
            "environment's target return, and the env step of each one's first (median; range); descriptive, "
            "no verdict.\n"
        )
    for env in loading.env_order(runs["env"].unique().tolist()):
        here = runs[runs["env"] == env]
        target = targets.loc[targets["env"] == env, "target"]
        reach_header = f"reached {target.iloc[0]:g} (first at)" if len(target) else "reached the target"
        lines = [
            f"### {env}",
            "",
            f"| variant | runs | final return IQM [95% CI] | {reach_header} | vs {reference}, final return "
            f"| vs {reference}, auc_return |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for variant in loading.variant_order(here["variant"].unique().tolist()):
            cells = [
                variant,
                _runs_cell(runs, env, variant),
                _iqm_cell(summary, env, variant),
                _reach_cell(targets, env, variant),
            ]
            for metric in stats.RETURN_METRICS:
                match = verdicts[
                    (verdicts["env"] == env) & (verdicts["variant"] == variant) & (verdicts["metric"] == metric)
                ]
                if variant == reference:
                    cells.append("-")
                elif looked is not None:
                    cells.append(look_cell(judged.get((env, variant, metric)), looked.end))
                else:
                    cells.append(verdict_cell(None if match.empty else match.iloc[0]))
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


def write_findings(
    path,
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    runs: pd.DataFrame,
    reference: str,
    targets: pd.DataFrame,
    sources: Sequence[str],
    looked: looks.Looks | None = None,
) -> None:
    header = f"# Findings of {', '.join(sources)}\n\n"
    text = findings_markdown(summary, verdicts, runs, reference, targets, looked)
    records.atomic_write_text(path, header + text)
