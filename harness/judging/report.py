"""The report of one results folder: tables, figures and one offline HTML page.

`build_report(results_dir, out_dir)` reads only run records (results/README.md) through
`harness.judging.stats`, never a learner, and writes into `out_dir`:

    index.html          verdicts, each variant's differences from the reference, figures, protocol
    runs.csv            one row per readable run (runs.csv's columns + reason)
    summary.csv         IQM / mean / median / optimality gap with 95% bootstrap intervals
    verdicts.csv        P(variant > reference) with its interval and the verdict
    findings.md         the verdicts as one Markdown table per environment, for a README (findings.py;
                        a sequential grid's: the looks' verdicts)
    looks.csv           a sequential grid's comparisons after its last look (looks.py)
    *.png               figures, linked from index.html by relative path

Every file is written atomically (harness.records). `report_command` is the CLI entry point.
"""

from __future__ import annotations

import html
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from variants.catalog import CATALOG, REFERENCE
from variants.spec import field_doc

from .. import records
from . import attribution, inference, loading, looks, normalization, stats
from .figures import FigureFile, draw_figures, variant_colors
from .findings import reach_text, write_findings

VERDICT_CLASSES = {
    stats.BETTER: "better",
    stats.WORSE: "worse",
    stats.NO_DIFFERENCE: "nodiff",
    stats.EQUIVALENT: "equiv",
}
REPORT_PACKAGES = ("numpy", "pandas", "scipy", "rliable", "matplotlib", "seaborn")


@dataclass(frozen=True)
class ReportSummary:
    """What `build_report` wrote and what it found."""

    out_dir: Path
    index_html: Path
    files: tuple[Path, ...]  # every file written, index.html included
    n_runs: int  # readable runs (skipped folders excluded)
    state_counts: dict[str, int]  # {state: runs}
    warnings: tuple[str, ...]  # one line per skipped run folder


class NoReadableRuns(ValueError):
    """The results folder holds no run that can be read: no report is written."""


# --- entry points --------------------------------------------------------------------------------


def report_command(
    results_dir: Path,
    out_dir: Path,
    reference: str | None = None,
    targets: Mapping[str, float] | None = None,
    randoms: Mapping[str, float] | None = None,
    more_results: Sequence[Path] = (),
    variants: Sequence[str] | None = None,
    pending: int | None = None,
) -> int:
    """CLI body of `python -m harness report RESULTS [MORE ...] [--variants V,...] --out OUT`: build the
    report and say where it went.

    `reference`: the variant the others are judged against, required to have runs; None: the catalog's
    `reference`, judged against if it ran (a grid without it gets "no reference" verdicts).
    Returns 0 on success, 2 (after one line on stderr, no traceback) when a results folder does not
    exist or holds no run folders, when none of their runs (of `variants`) is readable, when a named
    reference has none, or when two folders record the same run.
    """
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    for folder in (results_dir, *map(Path, more_results)):
        problem = records.not_a_results_folder(folder)
        if problem:
            print(f"error: results folder {folder} {problem}", file=sys.stderr)
            return 2
        if not loading.find_run_folders(folder):
            print(f"error: {folder} holds no run folders (expected runs/<env>/<variant>/seed_<k>/)", file=sys.stderr)
            return 2
    problem = records.unwritable(out_dir, keep_created=False)  # a refused report leaves no folder
    if problem:
        print(f"error: cannot write the report to {out_dir}: {problem}", file=sys.stderr)
        return 2
    try:
        summary = build_report(
            results_dir,
            out_dir,
            reference=reference or stats.REFERENCE_NAME,
            targets=targets,
            randoms=randoms,
            more_results=more_results,
            variants=variants,
            pending=pending or None,
            reference_required=reference is not None,
        )
    except (NoReadableRuns, loading.DuplicateRun) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the folder was writable a moment ago: a full disk, say
        print(f"error: cannot write the report to {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for warning in summary.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    states = ", ".join(f"{n} {state}" for state, n in summary.state_counts.items() if n)
    print(
        f"report: {summary.index_html} ({summary.n_runs} runs: {states or 'none readable'}; "
        f"{len(summary.warnings)} folder(s) skipped)"
    )
    return 0


def build_report(
    results_dir: Path,
    out_dir: Path,
    reference: str = stats.REFERENCE_NAME,
    reps: int = stats.DEFAULT_REPS,
    targets: Mapping[str, float] | None = None,
    randoms: Mapping[str, float] | None = None,
    pending: int | None = None,
    more_results: Sequence[Path] = (),
    variants: Sequence[str] | None = None,
    reference_required: bool = False,
) -> ReportSummary:
    """Read the run records of `results_dir` and write the report into `out_dir` (see module doc).

    `more_results`: more results folders read with it as one (`loading.scan_many`; a study run beside the
    campaign whose reference runs it pairs with). `variants`: judge only these (the reference is always
    kept), so that a study's family holds its own comparisons; None: every variant found.

    Normalization constants, per env: `targets` / `randoms` ({env: return}, from `report --target
    --random`), else those the runs recorded (`run --target --random`), else harness.judging.normalization's table.
    An env with neither is reported in raw returns only and left out of the pooled `all` column.
    `pending`: runs of a grid still running (a live report); the page says how many are to come.
    Raises NoReadableRuns, before writing anything, when no run can be read or a named variant (or the
    reference, if `reference_required`) has no run folder, and loading.DuplicateRun when two folders record the same run.
    """
    if reps < 2000:
        raise ValueError("reps must be at least 2000 for stable 95% intervals")
    sources = [Path(results_dir), *map(Path, more_results)]
    data = loading.scan_many(sources, None if variants is None else [reference, *variants])
    found = set(data.runs["variant"]) | set(data.unfinished_variants())
    missing = [v for v in [*([reference] if reference_required else []), *(variants or ())] if v not in found]
    if missing:
        raise NoReadableRuns(f"no run of {', '.join(missing)} in {', '.join(map(str, sources))}")
    if data.runs.empty:
        raise NoReadableRuns(
            f"{', '.join(map(str, sources))} holds no readable run"
            + (f" of {', '.join(variants)}" if variants is not None else "")
            + " (every run folder is unfinished or corrupt)"
        )
    recorded_targets, recorded_randoms, _ = normalization.recorded(data.configs)
    with normalization.extended({**recorded_targets, **(targets or {})}, {**recorded_randoms, **(randoms or {})}):
        return _build_report(data, sources, Path(out_dir), reference, reps, pending)


def _build_report(
    data: loading.RunRecords, sources: Sequence[Path], out_dir: Path, reference: str, reps: int, pending: int | None
) -> ReportSummary:
    # Failed and diverged runs are scored (stats.score_failures): a variant is judged on all its runs.
    runs = stats.scored_runs(data)
    scores = stats.seed_scores(runs)  # the one scoring pass: every table and figure below reads it
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    written.append(_write_runs_csv(out_dir / "runs.csv", data.runs, runs))
    summary = stats.summary_table(runs, reps, scores)
    written.append(_write_frame(out_dir / "summary.csv", summary))
    verdicts = pd.concat(
        [stats.verdict_table(runs, reference, metric=m, reps=reps, scores=scores) for m in stats.RETURN_METRICS],
        ignore_index=True,
    )
    written.append(_write_frame(out_dir / "verdicts.csv", verdicts))
    power = stats.power_table(verdicts)
    written.append(_write_frame(out_dir / "power.csv", power))
    written.append(_write_frame(out_dir / "pairing.csv", stats.pairing_table(runs, reference, scores=scores)))
    failures = stats.failure_table(runs, reference)
    written.append(_write_frame(out_dir / "failures.csv", failures))
    targets = stats.target_table(stats.first_reach_steps(data.eval_curves, runs))
    written.append(_write_frame(out_dir / "targets.csv", targets))
    late = stats.late_diagnostics(data.diagnostics, runs)
    written.append(_write_frame(out_dir / "late_diagnostics.csv", late))
    looked, sequential_section = _looks_section(sources[0], reference, out_dir, written)  # a sequential grid's
    write_findings(
        out_dir / "findings.md", summary, verdicts, runs, reference, targets, [str(s) for s in sources], looked
    )
    written.append(out_dir / "findings.md")
    attributed = attribution.for_report(sources, runs, data.configs, VERDICT_CLASSES, scores)  # an ablation grid's
    if attributed is not None:
        written.append(_write_frame(out_dir / "attribution.csv", attributed.table))
        records.atomic_write_text(out_dir / "attribution.md", attributed.markdown)
        written.append(out_dir / "attribution.md")

    colors = variant_colors(runs["variant"].tolist(), reference)
    curves = stats.iqm_learning_curves(data.eval_curves, runs, reps)
    diagnostics = stats.mean_diagnostics(data.diagnostics)
    figures = draw_figures(out_dir, runs, scores, summary, verdicts, curves, diagnostics, colors, reference, reps)
    written.extend(out_dir / f.filename for f in figures)

    page = render_html(
        sources,
        runs,
        summary,
        verdicts,
        data.configs,
        data.warnings,
        data.unfinished,
        figures,
        reference,
        reps,
        power,
        failures,
        pending=pending,
        targets=targets,
        late=late,
        sections=(attributed.html,) if attributed is not None else (),
        first=(sequential_section,),
    )
    index = out_dir / "index.html"
    records.atomic_write_text(index, page)
    written.append(index)

    counts = {state: int((runs["state"] == state).sum()) for state in records.STATES}
    return ReportSummary(out_dir, index, tuple(written), len(runs), counts, tuple(data.skipped()))


def _looks_section(results: Path, reference: str, out_dir: Path, written: list[Path]) -> tuple[looks.Looks | None, str]:
    """The looks of a sequential grid (`harness run --until-decided`) recorded in `results`, with an HTML
    section, and looks.csv (appended to `written`); (None, '') when `results` holds none. An unreadable
    looks.json, or looks judged against another reference than the report's, gives None and a section
    that says so."""
    try:
        state = looks.read_looks(results)
    except looks.LooksError as exc:
        return None, f'<h2>Sequential verdicts</h2><p class="warn">Not shown: {esc(exc)}</p>\n'
    if state is None:
        return None, ""
    if state.reference != reference:
        return None, (
            f'<h2>Sequential verdicts</h2><p class="warn">Not shown: the looks judged against '
            f"<code>{esc(state.reference)}</code>, this report against <code>{esc(reference)}</code>.</p>\n"
        )
    written.append(_write_frame(out_dir / "looks.csv", looks.comparison_frame(state)))
    design = state.rule_design
    rows = [
        (
            c.env,
            c.variant if c.against == state.reference else f"{c.variant} vs {c.against}",
            c.metric,
            f'<td class="{VERDICT_CLASSES.get(c.verdict, "other")}">{esc(c.verdict)}</td>',
            looks.comparison_text(c, state),
        )
        for c in looks.comparisons(state)
    ]
    body = "".join(
        f"<tr><td>{esc(env)}</td><td>{esc(variant)}</td><td>{esc(metric)}</td>{cell}<td>{esc(text)}</td></tr>\n"
        for env, variant, metric, cell, text in rows
    )
    return state, (
        "<h2>Sequential verdicts: the looks of this grid</h2>\n"
        f"<p>{esc(looks.summary_lines(state)[0])}. Rule <code>{esc(design.rule)}</code> "
        "(harness.judging.sequential): its family-wise error over every look and comparison is at most "
        f"{design.alpha:g} per metric"
        + (f"; <em>equivalent</em>: the interval lies inside +-{design.margin:g} normalized" if design.margin else "")
        + ". "
        "A variant closed on the basis of a failure failed on every seed of a look with the same error at the "
        "same step: an exception that recurs, decided outside the error budget. These are the verdicts the "
        'grid stopped on (<a href="looks.csv">looks.csv</a>); the fixed-seed table below applies the '
        "fixed rule to the same runs, whose seed counts the looks chose, so its stated level does not hold "
        "for them.</p>\n"
        "<table><thead><tr><th>env</th><th>variant</th><th>metric</th><th>verdict</th><th>when</th></tr></thead>"
        f"<tbody>\n{body}</tbody></table>\n"
    )


# --- tables --------------------------------------------------------------------------------------


def _cell(value: Any) -> Any:
    """A CSV cell: Python scalars (numpy's repr differs), NaN as empty."""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return None if value != value else value
    if isinstance(value, np.integer):
        return int(value)
    return value


def _write_frame(path: Path, frame: pd.DataFrame) -> Path:
    records.write_csv(path, list(frame.columns), ([_cell(v) for v in row] for row in frame.itertuples(index=False)))
    return path


def _write_runs_csv(path: Path, recorded: pd.DataFrame, scored: pd.DataFrame) -> Path:
    """runs.csv's columns as recorded, the failure reason, and the scores the statistics used
    (final_score, auc_score: the recorded returns, or a failed or diverged run's failure score)."""
    frame = recorded[[*records.RUNS_COLUMNS, "reason"]].assign(
        final_score=scored["final_return"].to_numpy(), auc_score=scored["auc_return"].to_numpy()
    )
    return _write_frame(path, frame)


# --- HTML ----------------------------------------------------------------------------------------


def esc(value: Any) -> str:
    """HTML-escaped text of `value` (quotes too, so it is safe inside attributes)."""
    return html.escape(str(value), quote=True)


def _num(value: float) -> str:
    if value != value:
        return ""
    magnitude = abs(value)
    return f"{value:.0f}" if magnitude >= 1000 else f"{value:.1f}" if magnitude >= 10 else f"{value:.3f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An HTML table; every header and cell is escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>\n"


def render_html(
    sources: Sequence[Path],
    runs: pd.DataFrame,
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    configs: Mapping[tuple[str, str, int], dict],
    warnings: Sequence[str],
    unfinished: Sequence[str],
    figures: Sequence[FigureFile],
    reference: str,
    reps: int,
    power: pd.DataFrame | None = None,
    failures: pd.DataFrame | None = None,
    pending: int | None = None,
    targets: pd.DataFrame | None = None,
    late: pd.DataFrame | None = None,
    sections: Sequence[str] = (),
    first: Sequence[str] = (),
) -> str:
    """The report page: verdicts, warnings, differences from the reference, summary, runs reaching the
    target, figures, protocol. `sources`: the results folders read (the first names the report);
    `sections`: more HTML put after the verdicts (an ablation grid's attribution); `first`: before them
    (a sequential grid's looks)."""
    title = " + ".join(Path(s).name for s in sources)
    envs = loading.env_order(runs["env"].tolist())
    counts = {state: int((runs["state"] == state).sum()) for state in records.STATES}
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f"<title>sacbench report: {esc(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>sacbench report: {esc(title)}</h1>",
        (
            f'<p class="warn"><strong>Live report:</strong> the grid is still running; {pending} planned run(s) '
            "are still to come. This page is rewritten as runs finish.</p>"
            if pending
            else ""
        ),
        f'<p class="lead">{len(runs)} runs read from '
        + " and ".join(f"<code>{esc(s)}</code>" for s in sources)
        + ": "
        + ", ".join(f"{n} {esc(s)}" for s, n in counts.items())
        + (
            f"; {len(unfinished)} unfinished (no status.json yet: "
            + ("in progress" if pending else "a rerun of the grid's command resumes them")
            + ", not counted)"
            if unfinished
            else ""
        )
        + (f"; <strong>{len(warnings)} run folder(s) skipped</strong> (see warnings)" if warnings else "")
        + f'. Reference: <code>{esc(reference)}</code>. Tables: <a href="runs.csv">runs.csv</a>, '
        '<a href="summary.csv">summary.csv</a>, <a href="verdicts.csv">verdicts.csv</a>.</p>',
        *first,
        _verdict_section(verdicts, runs, envs, reference, power, failures),
        *sections,
        _identical_note(runs),
        same_as_note(runs),
        _warning_section(warnings),
        _unfinished_section(unfinished, pending),
        _differences_section(runs, configs, reference),
        _summary_section(summary),
        _target_section(targets),
        _late_section(late),
        _figure_sections(figures, runs),
        _protocol_section(runs, configs, reps),
        "</body></html>\n",
    ]
    return "\n".join(p for p in parts if p)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
padding:0 1em;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:0.6em 0 1.2em}th,td{border:1px solid #ccc;padding:0.3em 0.6em;
vertical-align:top;text-align:left}th{background:#f2f2f2}small{color:#555}
td.better{background:#d8f0d0}td.worse{background:#f8d4cc}td.nodiff{background:#f2f2f2}td.equiv{background:#e4eef8}td.other{color:#777}
.warn{background:#fff4d6;border:1px solid #e0b84c;padding:0.5em 1em}
figure{margin:1em 0 2em}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:0.9em}
code{background:#f4f4f4;padding:0 0.2em}.lead{font-size:1.05em}
"""


def _method_text(verdicts: pd.DataFrame, family: int) -> str:
    """How a verdict table holds its family: many-to-one max-t or Bonferroni, with the per-comparison level."""
    methods = set(verdicts["method"].dropna()) - {""} if "method" in verdicts else set()
    level = float(verdicts["level"].max()) if not verdicts.empty else math.nan
    if methods == {inference.MANY_TO_ONE} and family > 1:
        return (
            "<strong>method:</strong> many-to-one simultaneous t intervals (max-t, Dunnett's construction with the "
            "comparisons' correlation through the reference's shared runs estimated from the per-seed differences), "
            f"each at level {level:.4f} (Bonferroni would use 1 - 0.05/{family} = {1 - 0.05 / family:.4f})"
        )
    return f"<strong>method:</strong> Bonferroni t intervals at level 1 - 0.05/{max(family, 1)} each"


def _verdict_section(
    verdicts: pd.DataFrame,
    runs: pd.DataFrame,
    envs: Sequence[str],
    reference: str,
    power: pd.DataFrame | None = None,
    failures: pd.DataFrame | None = None,
) -> str:
    final = verdicts[verdicts["metric"] == "final_return"] if not verdicts.empty else verdicts
    family = int(final["family_size"].max()) if not final.empty else 0
    intro = (
        f"<h2>Verdicts: each variant vs <code>{esc(reference)}</code></h2>\n"
        "<p>From the final return, in normalized score where the environment has constants (0 = uniform random "
        "policy, 1 = target; raw return otherwise). Each cell compares the runs of the same seed (they share "
        "their environment and evaluation resets): the mean per-seed difference with its <em>simultaneous</em> "
        "interval, paired Student t (Welch's unpaired t where the seeds do not match). "
        + (
            f"<strong>Family:</strong> the {family} final-return comparisons of this report (per environment and, over "
            "two or more environments, <em>all</em>); "
            if family
            else f"<strong>Family:</strong> none yet: no variant has the {stats.MIN_RUNS_FOR_VERDICT} runs a side that a "
            "verdict needs; "
        )
        + _method_text(final, family)
        + "; <strong>level:</strong> the chance that any cell of the table says better "
        "or worse when nothing differs is at most 5% (the auc_return verdicts below are a second family at the "
        "same level). <em>better</em> / <em>worse</em>: the interval lies above / below 0; <em>equivalent</em>: "
        f"it lies inside +-{inference.EQUIVALENCE_MARGIN:g} normalized (a difference too small to matter); "
        "<em>no detectable difference</em>: neither, and the cell says how large a difference the runs would "
        "have detected with 80% probability (so a smaller one may exist). Failed and diverged runs count, scored "
        "as a random policy from where they stopped.</p>\n"
    )
    if verdicts.empty:
        return intro + "<p>No variant other than the reference was run.</p>\n"
    out = [intro, _verdict_grid(final, runs, envs)]
    auc = verdicts[verdicts["metric"] == "auc_return"]
    if not auc.empty:
        out.append("<h3>auc_return (the mean over a run's evaluations)</h3>")
        out.append(_verdict_grid(auc, runs, envs))
    if power is not None and not power.empty:
        out.append(_power_section(power))
    if failures is not None:
        out.append(_failure_rate_section(failures, reference))
    return "\n".join(out)


def _verdict_grid(verdicts: pd.DataFrame, runs: pd.DataFrame, envs: Sequence[str]) -> str:
    # Over one environment 'all' is that environment's comparison again: no second column for it.
    panels = [*envs, stats.ALL_ENVS] if len(envs) > 1 else list(envs)
    rows = []
    for variant in loading.variant_order(verdicts["variant"].tolist()):
        cells = [f"<th>{esc(variant)}</th>"]
        for env in panels:
            match = verdicts[(verdicts["env"] == env) & (verdicts["variant"] == variant)]
            if match.empty:
                cells.append('<td class="other">not run</td>')
                continue
            v = match.iloc[0]
            css = VERDICT_CLASSES.get(v["verdict"], "other")
            label = v["verdict"]
            if label == stats.EQUIVALENT:
                label = f"equivalent within +-{v['margin']:g}"
            elif label in (stats.BETTER, stats.WORSE) and v["negligible"]:
                label = f"{label}, by less than {v['margin']:g} (too small to matter)"
            if v["paired"]:
                detail = f"{int(v['n_pairs'])} seeds paired"
            else:
                detail = f"n {int(v['n_runs'])} vs {int(v['n_reference_runs'])}"
                detail += "" if np.isnan(v["difference"]) else ", unpaired"
            unfinished = stats.not_complete_text(runs, variant, env)
            if unfinished:
                detail += f" ({unfinished})"
            if not np.isnan(v["difference"]):
                units = "" if v["units"] == "normalized" else " return"
                detail = f"diff {v['difference']:+.3g}{units} [{v['ci_low']:+.3g}, {v['ci_high']:+.3g}]; " + detail
                if v["verdict"] == stats.NO_DIFFERENCE:
                    detail += f"; none larger than {v['mdd']:.2g} missed (80% power)"
                    detail += _seeds_to_decide_text(v)
                if not np.isnan(v["poi"]):
                    detail += f"; PoI {v['poi']:.2f}"
            if env == stats.ALL_ENVS and v["envs_compared"] and v["envs_compared"].split(";") != list(envs):
                detail += f"; over {v['envs_compared'].replace(';', ', ')} only"
            cells.append(f'<td class="{css}"><strong>{esc(label)}</strong><br><small>{esc(detail)}</small></td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "<tr><th>variant</th>" + "".join(f"<th>{esc(e)}</th>" for e in panels) + "</tr>"
    return f'<table class="verdicts"><thead>{head}</thead><tbody>\n' + "\n".join(rows) + "\n</tbody></table>\n"


def _seeds_to_decide_text(v: pd.Series) -> str:
    """Where more seeds could decide an open comparison: '; 18 seeds would detect the difference seen',
    from `seeds_for_difference` (the spread seen, 80% power, the family's level); '' without a difference."""
    if v["difference"] == 0 or not np.isfinite(v["difference"]):
        return ""
    if np.isnan(v["seeds_for_difference"]):
        return f"; more than {inference.SEEDS_SEARCHED:,} seeds would be needed to detect the difference seen"
    return f"; {v['seeds_for_difference']:.0f} seeds would detect the difference seen"


def _power_section(power: pd.DataFrame) -> str:
    rows = []
    for r in power.itertuples(index=False):
        seeds = "" if np.isnan(r.seeds_for_target_median) else f"{r.seeds_for_target_median:.0f}"
        rows.append((r.metric, r.env, r.n_compared, f"{r.mdd_median:.3g}", f"{r.mdd_max:.3g}", seeds, r.units))
    return (
        "<h3>What these runs could detect</h3>\n<p>Minimum detectable difference: the true difference that a "
        "comparison detects with 80% probability at the family's level, from each comparison's own spread and "
        f"number of seeds (median and largest over the variants compared). Seeds for {inference.TARGET_DIFFERENCE:g}: "
        f"how many seeds per variant would detect a difference of {inference.TARGET_DIFFERENCE:g} normalized at the same "
        'spread and level (median over variants). See <a href="power.csv">power.csv</a>; what pairing by seed '
        "buys per comparison (the per-seed correlation, paired against unpaired interval widths): "
        '<a href="pairing.csv">pairing.csv</a>.</p>\n'
        + _table(
            [
                "metric",
                "env",
                "comparisons",
                "detectable (median)",
                "detectable (largest)",
                f"seeds for {inference.TARGET_DIFFERENCE:g}",
                "units",
            ],
            rows,
        )
    )


def _failure_rate_section(failures: pd.DataFrame, reference: str) -> str:
    if failures.empty:
        return f"<h3>Failure rates</h3>\n<p>No run of any variant or of {esc(reference)} failed or diverged.</p>\n"
    rows = [
        (
            r.env,
            r.variant,
            f"{r.failed}/{r.n_runs}",
            f"{r.reference_failed}/{r.n_reference_runs}",
            f"{r.p_value:.3g}",
            f"{r.p_holm:.3g}",
        )
        for r in failures.itertuples(index=False)
    ]
    return (
        "<h3>Failure rates</h3>\n<p>Runs that failed or diverged, against the reference's in the same env: "
        "Fisher's exact test, two-sided, Holm-adjusted over the rows of this table (reject at 0.05). "
        '<a href="failures.csv">failures.csv</a>.</p>\n'
        + _table(["env", "variant", "failed or diverged", esc(reference), "p", "p (Holm)"], rows)
    )


def identical_variants(runs: pd.DataFrame) -> list[list[str]]:
    """Groups of variants whose complete runs returned exactly the same final_return and auc_return
    for the same (env, seed), on the same set of runs (at least one). Their curves coincide in every
    figure, so a reader looking for the hidden colour needs to be told."""
    complete = runs[runs["state"] == "complete"]
    keyed: dict[tuple, list[str]] = {}
    for variant, rows in complete.groupby("variant", sort=False):
        key = tuple(sorted(zip(rows["env"], rows["seed"], rows["final_return"], rows["auc_return"])))
        keyed.setdefault(key, []).append(str(variant))
    return [loading.variant_order(group) for group in keyed.values() if len(group) > 1]


def _identical_note(runs: pd.DataFrame) -> str:
    groups = identical_variants(runs)
    if not groups:
        return ""
    items = "".join(f"<li>{esc(', '.join(g))}</li>" for g in groups)
    return (
        "<p>These variants returned exactly the same final and AUC returns in every run, so their curves "
        f"and intervals coincide in the figures (only the last one drawn is visible):</p><ul>{items}</ul>\n"
    )


def same_as_note(runs: pd.DataFrame) -> str:
    """Says which catalog entries were not run because another entry's runs compute their numbers
    (`CatalogEntry.same_as`, bit-identity tested), when that entry's runs are here and theirs are not."""
    present = set(runs["variant"])
    stand_ins = [
        (name, entry.same_as) for name, entry in CATALOG.items() if entry.same_as in present and name not in present
    ]
    if not stand_ins:
        return ""
    items = "".join(
        f"<li><code>{esc(name)}</code>: bit-identical to <code>{esc(other)}</code>, whose rows stand for both</li>"
        for name, other in stand_ins
    )
    return f"<p>Not run, because another variant's runs compute exactly the same numbers:</p><ul>{items}</ul>\n"


def _warning_section(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
    return (
        f'<div class="warn"><h2>Warnings</h2><p>{len(warnings)} run folder(s) could not be read and are not '
        f"in any table or figure:</p><ul>{items}</ul></div>\n"
    )


def _unfinished_section(unfinished: Sequence[str], pending: int | None) -> str:
    if not unfinished:
        return ""
    what = "still running" if pending else "stopped before they finished (rerun the grid's command to resume them)"
    items = "".join(f"<li><code>{esc(rel)}</code></li>" for rel in unfinished)
    return (
        f"<h3>Unfinished runs</h3><p>{len(unfinished)} run folder(s) without status.json, {what}; they are in "
        f"no table or figure yet:</p><ul>{items}</ul>\n"
    )


def _spec_key(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True)


def _distinct_specs(runs: pd.DataFrame, configs: Mapping[tuple[str, str, int], dict], variant: str) -> list[dict]:
    """The distinct spec dicts of `variant`'s runs (several if `--set` overrides differed between runs)."""
    seen: dict[str, dict] = {}
    for row in runs[runs["variant"] == variant].itertuples(index=False):
        spec = records.recorded_spec(configs[(row.env, row.variant, row.seed)])
        seen.setdefault(_spec_key(spec), spec)
    return [seen[k] for k in sorted(seen)]


def spec_differences(spec: Mapping[str, Any], reference_spec: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """`(field, reference value, variant value)` for every field whose values differ (missing = None)."""
    fields = list(reference_spec) + [k for k in spec if k not in reference_spec]
    return [(f, reference_spec.get(f), spec.get(f)) for f in fields if reference_spec.get(f) != spec.get(f)]


def _field_doc(name: str) -> str:
    try:
        return field_doc(name)
    except KeyError:  # a field this checkout's VariantSpec does not know
        return ""


def _differences_section(runs: pd.DataFrame, configs: Mapping[tuple[str, str, int], dict], reference: str) -> str:
    out = ["<h2>Differences from the reference</h2>"]
    reference_specs = _distinct_specs(runs, configs, reference)
    if reference_specs:
        reference_spec = reference_specs[0]
        source = f"the spec in the <code>{esc(reference)}</code> runs' config.json"
        if len(reference_specs) > 1:
            source += f" (<strong>the reference runs used {len(reference_specs)} different specs; the first is shown</strong>)"
    else:
        reference_spec = REFERENCE.to_dict()
        source = (
            f"<strong>no <code>{esc(reference)}</code> run in these results</strong>; compared with the catalog's "
            "reference spec (<code>variants.catalog.REFERENCE</code>)"
        )
    out.append(f"<p>Generated from the <code>spec</code> of each run's config.json; reference: {source}.</p>")
    variants = [v for v in loading.variant_order(runs["variant"].tolist()) if v != reference]
    if not variants:
        out.append("<p>No variant other than the reference was run.</p>")
    for variant in variants:
        first = runs[runs["variant"] == variant].iloc[0]
        config = configs[(first["env"], first["variant"], int(first["seed"]))]
        out.append(f"<h3>{esc(variant)}</h3>")
        if config.get("description"):
            out.append(f"<p>{esc(config['description'])}</p>")
        specs = _distinct_specs(runs, configs, variant)
        for spec in specs:
            if len(specs) > 1:
                out.append("<p><strong>One of several specs used by this variant's runs:</strong></p>")
            diffs = spec_differences(spec, reference_spec)
            if not diffs:
                out.append("<p>Same spec as the reference.</p>")
                continue
            out.append(
                _table(
                    ["field", "reference", "this variant", "meaning"],
                    [(f, json.dumps(a), json.dumps(b), _field_doc(f)) for f, a, b in diffs],
                )
            )
        overrides = sorted(
            {
                json.dumps(configs[(r.env, r.variant, r.seed)].get("overrides") or {}, sort_keys=True)
                for r in runs[runs["variant"] == variant].itertuples(index=False)
            }
        )
        if overrides != ["{}"]:
            out.append("<p>--set overrides: " + "; ".join(f"<code>{esc(o)}</code>" for o in overrides) + "</p>")
    return "\n".join(out) + "\n"


def _summary_section(summary: pd.DataFrame) -> str:
    """Final-return IQM per env (raw) and over envs (normalized), as a compact table."""
    iqm = summary[summary["metric"] == "final_return_iqm"]
    if iqm.empty:
        return "<h2>Final return</h2><p>No complete run: nothing to aggregate.</p>\n"
    envs = [*loading.env_order([e for e in iqm["env"] if e != stats.ALL_ENVS])]
    if (iqm["env"] == stats.ALL_ENVS).any():
        envs.append(stats.ALL_ENVS)
    rows = []
    for variant in loading.variant_order(iqm["variant"].tolist()):
        row = [variant]
        for env in envs:
            match = iqm[(iqm["env"] == env) & (iqm["variant"] == variant)]
            if match.empty:
                row.append("")
                continue
            r = match.iloc[0]
            row.append(f"{_num(r['estimate'])} [{_num(r['ci_low'])}, {_num(r['ci_high'])}] (n {int(r['n_runs'])})")
        rows.append(row)
    header = ["variant", *[f"{e} (normalized)" if e == stats.ALL_ENVS else e for e in envs]]
    return (
        "<h2>Final return (IQM, 95% CI)</h2>\n<p>Raw returns per environment; <em>all</em>: normalized scores "
        "(0 = uniform random policy, 1 = target) pooled over the same environments for every variant (failed and "
        "diverged runs at their failure score). "
        'Every metric is in <a href="summary.csv">summary.csv</a>.</p>\n' + _table(header, rows) + _raw_only_note(envs)
    )


def _target_section(targets: pd.DataFrame | None) -> str:
    if targets is None or targets.empty:
        return ""
    rows = [(r["env"], r["variant"], f"{r['target']:g}", reach_text(r)) for _, r in targets.iterrows()]
    return (
        "<h2>Reaching the target</h2>\n<p>Per environment with a target return, how many runs had an "
        "evaluation (the mean return of its episodes) at or above it, and the env step of each one's first "
        "(median and range over the runs that reached it). Runs of every state count: one that reached the "
        "target before it failed did reach it. Descriptive: no verdict is drawn from it, and it is not in the "
        'families above. <a href="targets.csv">targets.csv</a>.</p>\n'
        + _table(["env", "variant", "target", "reached (first at)"], rows)
    )


def _spread_text(row: pd.Series, column: str, scale: float = 1.0, spec: str = ".3g") -> str:
    median, low, high = (row[f"{column}_{s}"] * scale for s in ("median", "min", "max"))
    if np.isnan(median):
        return "-"
    return f"{median:{spec}}" if low == high else f"{median:{spec}} [{low:{spec}}, {high:{spec}}]"


def _late_section(late: pd.DataFrame | None) -> str:
    if late is None or late.empty:
        return ""
    # (column, scale, format): the log-prob gap in fixed point, as it is compared with 0.
    shown = [
        ("alpha", 1.0, ".3g"),
        ("entropy", 1.0, ".3g"),
        ("q_mean", 1.0, ".3g"),
        ("critic_loss", 1.0, ".3g"),
        ("saturation_fraction", 100.0, ".3g"),
        ("log_prob_gap", 1.0, ".4f"),
    ]
    rows = [
        (r["env"], r["variant"], str(r["n_runs"]), *(_spread_text(r, c, k, f) for c, k, f in shown))
        for _, r in late.iterrows()
    ]
    return (
        "<h2>At the end of training</h2>\n<p>The diagnostics over the last "
        f"{stats.LATE_FRACTION:.0%} of each complete run's env steps (the mean over its intervals there), as the "
        "median over runs [min, max]. Saturated: the share (%) of sampled action components with |tanh(u)| "
        "&gt; 0.999; log-prob gap: how far the naive log(1 - tanh(u)^2 + eps) is from the stable form on the "
        "sampled actions (0: the forms agree). A dash: the run did not record it (a peer implementation). "
        'Descriptive: no verdict is drawn from it. <a href="late_diagnostics.csv">late_diagnostics.csv</a>.</p>\n'
        + _table(
            ["env", "variant", "runs", "alpha", "entropy", "mean Q", "critic loss", "saturated (%)", "log-prob gap"],
            rows,
        )
    )


def _raw_only_note(envs: Sequence[str]) -> str:
    """Says which envs have no normalization constants, hence raw returns only and no part in `all`."""
    raw = [e for e in envs if e != stats.ALL_ENVS and not normalization.can_normalize(e)]
    if not raw:
        return ""
    return (
        f"<p>No target and random return are known for {esc(', '.join(raw))}: raw returns only, and left out "
        "of the pooled <em>all</em> column (give <code>--target ENV=RETURN --random ENV=RETURN</code> to "
        "<code>harness run</code> or <code>harness report</code> to include them).</p>\n"
    )


def _figure_sections(figures: Sequence[FigureFile], runs: pd.DataFrame) -> str:
    out = ["<h2>Figures</h2>"]
    section = None
    for figure in figures:
        if figure.section != section:
            section = figure.section
            out.append(f"<h3>{esc(section)}</h3>")
        if section == "Run states":
            out.append(_failures_table(runs))
        out.append(
            f'<figure><img src="{esc(quote(figure.filename))}" alt="{esc(figure.title)}">'
            f"<figcaption><strong>{esc(figure.title)}.</strong> {esc(figure.caption)}</figcaption></figure>"
        )
    if not figures:
        out.append("<p>No readable run: no figure.</p>")
    return "\n".join(out) + "\n"


def _failures_table(runs: pd.DataFrame) -> str:
    bad = runs[runs["state"] != "complete"]
    if bad.empty:
        return "<p>Every run completed.</p>"
    rows = [(r.env, r.variant, r.seed, r.state, r.env_steps, r.reason) for r in bad.itertuples(index=False)]
    return (
        "<p>Runs that did not complete (each enters every aggregate and verdict at its failure score, "
        "<code>final_score</code> and <code>auc_score</code> in runs.csv):</p>\n"
    ) + _table(["env", "variant", "seed", "state", "env steps reached", "reason"], rows)


def _distinct(values: Iterable[Any]) -> list[tuple[str, int]]:
    """Distinct values as JSON text with how many runs had each, most common first."""
    counts: dict[str, int] = {}
    for value in values:
        key = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _protocol_section(runs: pd.DataFrame, configs: Mapping[tuple[str, str, int], dict], reps: int) -> str:
    """The page's Protocol section: budgets and seeds, runs per cell, provenance and the statistics used.

    runs: one row per run (env, variant, seed, state, ...); configs: each run's config.json by (env, variant, seed).
    """
    keyed = [(row, configs[(row.env, row.variant, row.seed)]) for row in runs.itertuples(index=False)]
    out = ["<h2>Protocol</h2>", "<h3>Budgets and seeds</h3>", _budgets_table(runs, keyed), _seeds_table(runs)]
    out += ["<h3>Software and machine (from config.json)</h3>", _provenance_table(keyed)]
    out += ["<h3>Statistics</h3>", _statistics_notes(reps)]
    out.append(
        _table(
            ["env", "R_random", "R_target"],
            [
                (e, f"{normalization.R_RANDOM[e]:g}", f"{normalization.R_TARGET[e]:g}")
                for e in loading.env_order(runs["env"].tolist())
                if normalization.can_normalize(e)
            ],
        )
    )
    out.append(
        "<p>Report built with " + ", ".join(f"{esc(p)} {esc(_package_version(p))}" for p in REPORT_PACKAGES) + ".</p>"
    )
    return "\n".join(out) + "\n"


def _budgets_table(runs: pd.DataFrame, keyed: Sequence[tuple[Any, dict]]) -> str:
    """One row per (env, recorded budget): its profile, steps, evaluations, seeds and run count."""
    budget_rows = []
    for env in loading.env_order(runs["env"].tolist()):
        mine = [(r, c) for r, c in keyed if r.env == env]
        for budget_text, n in _distinct(c.get("budget") for _, c in mine):
            budget = json.loads(budget_text) if budget_text != "null" else {}
            budget = budget if isinstance(budget, dict) else {}
            seeds = sorted({r.seed for r, c in mine if json.dumps(c.get("budget"), sort_keys=True) == budget_text})
            budget_rows.append(
                (
                    env,
                    budget.get("profile", ""),
                    budget.get("total_steps", ""),
                    budget.get("eval_points", ""),
                    budget.get("eval_episodes", ""),
                    budget.get("diag_every", ""),
                    _seed_text(seeds),
                    n,
                )
            )
    return _table(
        [
            "env",
            "profile",
            "env steps per run",
            "evaluations",
            "episodes per evaluation",
            "diagnostics every",
            "seeds",
            "runs",
        ],
        budget_rows,
    )


def _seeds_table(runs: pd.DataFrame) -> str:
    """One row per (env, variant): its seeds and how many runs ended in each state."""
    seeds_rows = []
    for env in loading.env_order(runs["env"].tolist()):
        for variant in loading.variant_order(runs.loc[runs["env"] == env, "variant"].tolist()):
            cell = runs[(runs["env"] == env) & (runs["variant"] == variant)]
            states = ", ".join(
                f"{int((cell['state'] == s).sum())} {s}" for s in records.STATES if (cell["state"] == s).any()
            )
            seeds_rows.append((env, variant, _seed_text(sorted(cell["seed"].tolist())), states))
    return _table(["env", "variant", "seeds", "states"], seeds_rows)


def _provenance_table(keyed: Sequence[tuple[Any, dict]]) -> str:
    """The package versions, git commits, machines, devices and commands the runs recorded (distinct values)."""
    provenance = []
    package_names = sorted({k for _, c in keyed for k in (c.get("versions") or {})})
    for name in package_names:
        provenance.append((name, _distinct_text(_distinct((c.get("versions") or {}).get(name) for _, c in keyed))))
    for key, label in (
        ("git_commit", "git commit"),
        ("platform", "machine"),
        ("device", "device"),
        ("members", "seeds per batched learner"),
    ):
        provenance.append((label, _distinct_text(_distinct(c.get(key) for _, c in keyed))))
    commands = _distinct(" ".join(c.get("command") or []) for _, c in keyed)
    provenance.append(
        ("commands", _distinct_text(commands[:5]) + (f" ... ({len(commands)} in all)" if len(commands) > 5 else ""))
    )
    return _table(["what", "value (runs)"], provenance)


def _statistics_notes(reps: int) -> str:
    """How the report's statistics are computed, as an HTML list (`reps` bootstrap replications)."""
    return (
        "<ul>"
        "<li>Every run enters aggregates and verdicts: a failed or diverged run (or one with a NaN or infinite "
        "evaluation) is scored as if its policy were a uniform random one from where it stopped: every missing or "
        "non-finite evaluation counts at R_random (for an env without R_random, the lowest complete run's return); "
        "auc_return is the mean over the budget's evaluation points so filled, and the final return the lower of its "
        "last finite evaluation and R_random. Learning curves show complete runs only.</li>"
        f"<li>Intervals: 95% percentile intervals of rliable's stratified bootstrap ({reps} replications; each "
        "environment's runs resampled independently), seeded from what each estimates, so a rebuilt report gives "
        "identical numbers.</li>"
        "<li>IQM: 25% trimmed mean of all runs (pooled over environments for <em>all</em>). Median: of all runs (pooled over "
        "environments for <em>all</em>). Mean: of the per-environment means. Optimality gap: threshold minus the mean of min(score, threshold); threshold R_target on raw "
        "returns, 1 on normalized scores; lower is better.</li>"
        "<li>final_return: the last evaluation's mean return; auc_return: the mean over all of a run's evaluations.</li>"
        "<li>Verdicts: see the rule above the verdict table; PoI, rliable's probability of improvement, is shown "
        "beside each as an effect size, not as the test.</li>"
        f"<li>Verdicts need at least {stats.MIN_RUNS_FOR_VERDICT} runs on each side (otherwise <em>too few "
        "runs</em>): below that a t interval has too few degrees of freedom to detect anything.</li>"
        "<li>Normalized score = (R - R_random) / (R_target - R_random); R_random measured with "
        "<code>python -m harness.running.random_baseline</code> (100 episodes per env, uniform random actions, seed 0).</li>"
        "</ul>"
    )


def _seed_text(seeds: Sequence[int]) -> str:
    if not seeds:
        return ""
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"
    return ", ".join(str(s) for s in seeds)


def _distinct_text(values: Sequence[tuple[str, int]]) -> str:
    if len(values) == 1:
        return f"{values[0][0]} (all)"
    return "; ".join(f"{v} ({n})" for v, n in values)


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.judging.report RESULTS --out OUT` (the harness CLI calls `report_command` directly)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m harness.judging.report", description="Build the report of a results folder."
    )
    parser.add_argument("results", type=Path, help="results folder (results/NAME)")
    parser.add_argument("--out", type=Path, required=True, help="report folder (reports/NAME)")
    parser.add_argument("--reference", default=None, help="variant the others are compared with (default: reference)")
    args = parser.parse_args(argv)
    return report_command(args.results, args.out, args.reference)


if __name__ == "__main__":
    sys.exit(main())
