"""Every variant x environment verdict at a glance, read from committed reports' verdicts.csv and looks.csv.

A verdict matrix reads what reports already decided; it computes no statistic of its own, so each of
its cells is a row of one report's verdicts.csv (the per-environment rows, not the pooled `all`), or,
where the study is a sequential grid (`run --until-decided`: the report has looks.csv), the row of
looks.csv that judged it: the fixed rule's stated level does not hold on seed counts the looks chose,
the looks' rule holds its own. A README built from it cites numbers its reports show. One frame is the
data contract:

    verdict_frame(report_dirs) -> DataFrame, one row per (study, env, variant, metric), columns
        study       the report folder's name (one study: an environment at one budget)
        env, variant, metric, verdict, difference, ci_low, ci_high, mdd, n_pairs
        rule        "fixed" (verdicts.csv) or "sequential" (looks.csv: verdict, difference, interval and
                    seeds are the look's; mdd stays verdicts.csv's, the fixed rule's on those runs)
        failed      the sequential grid closed it as worse because every run of a look failed alike
        stopped     the sequential grid stopped it for futility (open)

Only comparisons against the variant named `reference` are kept: a study judged against another
variant (an ablation's `--reference reward-scaled`) answers another question.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window; must precede pyplot's import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .. import records  # noqa: E402
from . import findings, inference, stats  # noqa: E402

COLUMNS = ("env", "variant", "reference", "metric", "verdict", "difference", "ci_low", "ci_high", "mdd", "n_pairs")
# The matrix's four answers; "open" is the report's "no detectable difference" (and its "too few runs").
SHORT = {
    inference.BETTER: "better",
    inference.WORSE: "worse",
    inference.EQUIVALENT: "equivalent",
}
OPEN = "open"
FIXED, SEQUENTIAL = "fixed", "sequential"  # which rule judged a cell: verdicts.csv's or looks.csv's
LOOKS_COLUMNS = ("env", "variant", "metric", "verdict", "difference", "low", "high", "seeds", "basis")
COLORS = {"better": "#4c9a2a", "worse": "#d55e00", "equivalent": "#56b4e9", OPEN: "#d9d9d9"}
METRIC_TITLES = {"final_return": "final return", "auc_return": "auc_return (area under the curve)"}


class MatrixError(ValueError):
    """A report folder cannot be read as a study of the matrix (a usage error)."""


def verdict_frame(report_dirs: Sequence[Path], reference: str = stats.REFERENCE_NAME) -> pd.DataFrame:
    """The verdicts of `report_dirs` against `reference`, one row per (study, env, variant, metric), a
    sequential grid's from its looks.csv (module doc).

    Raises MatrixError naming the folder when one has no verdicts.csv, lacks a column, or holds no
    comparison against `reference`, or when its looks.csv cannot be read.
    """
    frames = []
    for folder in report_dirs:
        path = Path(folder) / "verdicts.csv"
        if not path.is_file():
            raise MatrixError(f"{folder} has no verdicts.csv (build it with: python -m harness report RESULTS)")
        table = _read_table(path, COLUMNS)
        table = table[(table["env"] != "all") & (table["reference"] == reference)]
        if table.empty:
            raise MatrixError(f"{path} holds no comparison against {reference!r}")
        table = table[list(COLUMNS)].assign(rule=FIXED, failed=False, stopped=False)
        frames.append(_with_looks(Path(folder), table, reference).assign(study=Path(folder).resolve().name))
    if not frames:
        raise MatrixError("no report folder given")
    return pd.concat(frames, ignore_index=True)


def _read_table(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    """The CSV at `path`; MatrixError naming it when it cannot be read or lacks one of `columns`."""
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path} is not a readable table: {exc}") from exc
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise MatrixError(f"{path} lacks the column(s) {', '.join(missing)}")
    return table


def _with_looks(folder: Path, table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """`table` (one report's rows of `verdict_frame`) with every comparison against `reference` its
    looks.csv holds taken from there, where the report has one (an ablation's looks also compare some
    variants with the ablated variant: not a cell of the matrix)."""
    path = folder / "looks.csv"
    if not path.is_file():
        return table
    looks = _read_table(path, LOOKS_COLUMNS)
    if "against" in looks.columns:
        looks = looks[looks["against"].isna() | (looks["against"] == reference)]
    table = table.reset_index(drop=True)
    for _, look in looks.iterrows():
        at = table.index[
            (table["env"] == look["env"]) & (table["variant"] == look["variant"]) & (table["metric"] == look["metric"])
        ]
        if at.empty:
            continue
        table.loc[at, ["verdict", "difference", "ci_low", "ci_high", "n_pairs"]] = [
            look["verdict"],
            look["difference"],
            look["low"],
            look["high"],
            look["seeds"],
        ]
        stopped = _true(look.get("stopped", False))  # a looks.csv of before futility has no such column
        table.loc[at, ["rule", "failed", "stopped"]] = [SEQUENTIAL, look["basis"] == "failure", stopped]
    return table


def _true(value: object) -> bool:
    """looks.csv's stopped cell: True/False as pandas reads them, or their text."""
    return str(value).strip().lower() == "true"


def short_verdict(verdict: str) -> str:
    """better / worse / equivalent, or open for a comparison the runs did not decide."""
    return SHORT.get(verdict, OPEN)


def _difference_text(row: pd.Series) -> str:
    """The difference alone, with the decimals its interval is written with in `cell_text`."""
    return f"{row['difference']:+.{findings.interval_decimals(row['ci_low'], row['ci_high'])}f}"


def cell_text(row: pd.Series) -> str:
    """One comparison in words: 'better +0.44 [+0.08, +0.80], 10 seeds' or 'open (MDD 0.49), 10 seeds';
    a sequential grid's: 'worse (every run failed), 5 seeds', 'open +0.06 [-0.39, +0.51], 10 seeds' (the
    interval says what it could have missed), '... stopped for futility, 10 seeds'."""
    seeds = f"{int(row['n_pairs'])} seeds"
    verdict = short_verdict(row["verdict"])
    if row.get("failed", False):
        return f"{verdict} (every run failed), {seeds}"
    if verdict == OPEN and row.get("rule") == SEQUENTIAL:
        stopped = " stopped for futility," if row.get("stopped", False) else ""
        interval = findings.interval_text(row["difference"], row["ci_low"], row["ci_high"])
        return f"open {interval},{stopped} {seeds}"
    if verdict == OPEN:
        mdd = row["mdd"]
        return f"open (MDD {mdd:.2f}), {seeds}" if np.isfinite(mdd) else f"open, {seeds}"
    return f"{verdict} {findings.interval_text(row['difference'], row['ci_low'], row['ci_high'])}, {seeds}"


def _figure(row: pd.Series, verdict: str) -> str:
    """A PNG cell's number: the difference, the MDD where the fixed rule left it open, the interval where
    a sequential grid did (marked where it stopped for futility)."""
    if row.get("failed", False):
        return "every run failed"
    if verdict == OPEN and row.get("rule") == SEQUENTIAL:
        d = findings.interval_decimals(row["ci_low"], row["ci_high"])
        mark = " (stopped)" if row.get("stopped", False) else ""
        return f"[{row['ci_low']:+.{d}f}, {row['ci_high']:+.{d}f}]{mark}"
    return f"MDD {row['mdd']:.2f}" if verdict == OPEN else _difference_text(row)


def _studies(frame: pd.DataFrame) -> list[tuple[str, str]]:
    return list(dict.fromkeys(zip(frame["study"], frame["env"])))


def _sequential_studies(frame: pd.DataFrame) -> set[str]:
    """The studies some of whose cells a sequential grid's looks judged."""
    return set(frame.loc[frame["rule"] == SEQUENTIAL, "study"]) if "rule" in frame else set()


def _variants(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["variant"]))


def _cell(rows: pd.DataFrame, study: str, env: str, variant: str) -> pd.Series | None:
    """The row of one (study, env, variant) among one metric's `rows`, None where it was not run."""
    match = rows[(rows["study"] == study) & (rows["env"] == env) & (rows["variant"] == variant)]
    return None if match.empty else match.iloc[0]


def matrix_markdown(frame: pd.DataFrame, metric: str) -> list[str]:
    """A Markdown table for `metric`: a row per variant, a column per study, each cell `cell_text`
    ('-' where the study did not run the variant)."""
    studies = _studies(frame)
    rows = frame[frame["metric"] == metric]
    looked = _sequential_studies(frame)
    lines = [
        "| variant | "
        + " | ".join(f"{env} ({study}{', sequential looks' if study in looked else ''})" for study, env in studies)
        + " |",
        "| --- | " + " | ".join("---" for _ in studies) + " |",
    ]
    for variant in _variants(frame):
        cells = []
        for study, env in studies:
            row = _cell(rows, study, env, variant)
            cells.append(cell_text(row) if row is not None else "-")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def matrix_png(frame: pd.DataFrame, metrics: Sequence[str] = stats.RETURN_METRICS) -> bytes:
    """The matrix as a PNG: a panel per metric, a row per variant, a column per study; each cell
    colored by its verdict and labelled with the difference (or the MDD where open) and the seeds."""
    studies = _studies(frame)
    variants = _variants(frame)
    looked = _sequential_studies(frame)
    width = 1.9 * len(studies) + 1.6
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(width * len(metrics), 0.42 * len(variants) + 1.6), squeeze=False, sharey=True
    )
    for ax, metric in zip(axes[0], metrics):
        rows = frame[frame["metric"] == metric]
        for j, (study, env) in enumerate(studies):
            for i, variant in enumerate(variants):
                row = _cell(rows, study, env, variant)
                if row is None:
                    ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor="white", edgecolor="#bbbbbb", lw=0.5))
                    ax.text(j + 0.5, i + 0.5, "not run", ha="center", va="center", fontsize=7, color="#888888")
                    continue
                verdict = short_verdict(row["verdict"])
                ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=COLORS[verdict], edgecolor="white", lw=1.5))
                figure = _figure(row, verdict)
                ax.text(
                    j + 0.5, i + 0.5, f"{figure}\n{int(row['n_pairs'])} seeds", ha="center", va="center", fontsize=7
                )
        ax.set_xlim(0, len(studies))
        ax.set_ylim(len(variants), 0)
        ax.set_xticks(np.arange(len(studies)) + 0.5)
        ax.set_xticklabels(
            [f"{env}\n{study}" + ("\n(sequential looks)" if study in looked else "") for study, env in studies],
            fontsize=7,
        )
        ax.xaxis.tick_top()
        ax.set_yticks(np.arange(len(variants)) + 0.5)
        ax.set_yticklabels(variants, fontsize=8)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(METRIC_TITLES.get(metric, metric), fontsize=9, pad=28)
    handles = [Patch(facecolor=c, label=v) for v, c in COLORS.items()]
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        title="each variant against the reference: normalized difference (MDD where open; the interval where "
        "a sequential grid's looks left it open; (stopped): its futility rule stopped adding seeds), paired seeds",
        title_fontsize=8,
    )
    buffer = io.BytesIO()
    # Software-only metadata: the same verdicts give the same PNG bytes.
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_matrix(report_dirs: Sequence[Path], out_png: Path, out_markdown: Path | None = None) -> pd.DataFrame:
    """Write the matrix PNG (and its Markdown tables, one per metric) atomically; returns the frame."""
    frame = verdict_frame(report_dirs)
    records.atomic_write_bytes(Path(out_png), matrix_png(frame))
    if out_markdown is not None:
        parts = []
        for metric in stats.RETURN_METRICS:
            parts += [f"### {METRIC_TITLES[metric]}", "", *matrix_markdown(frame, metric), ""]
        records.atomic_write_text(Path(out_markdown), "\n".join(parts))
    return frame
