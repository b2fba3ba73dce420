"""The report's figures: one PNG per figure, written beside index.html, and what the page says of each.

Every figure is drawn from the tables `harness.judging.stats` computes from run records (curves,
summary, verdicts, diagnostics, runs); none reads a learner. `draw_figures` draws them all and returns
their `FigureFile`s in page order.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window; must precede pyplot's import

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from rliable import plot_utils  # noqa: E402

from variants.catalog import CATALOG  # noqa: E402

from .. import records
from . import loading, normalization, stats  # noqa: E402

STATE_COLORS = {"complete": "#4c9a2a", "diverged": "#e69f00", "failed": "#d55e00"}
DIAGNOSTIC_TITLES = {
    "alpha": "alpha (entropy temperature)",
    "entropy": "policy entropy  -mean(log pi)",
    "q_mean": "mean Q(s, a)",
    "critic_loss": "critic loss (sum of both MSEs)",
    "saturation_fraction": "share of |tanh(u)| > 0.999",
    "log_prob_gap": "log-prob gap (naive - softplus)",
}
LOG_SCALE_DIAGNOSTICS = ("alpha", "critic_loss")  # may span orders of magnitude: log when all > 0 and they do


# --- colours and names in figures ------------------------------------------------------------------


def variant_colors(
    variants: Sequence[str], reference: str = stats.REFERENCE_NAME
) -> dict[str, tuple[float, float, float]]:
    """One fixed colour per variant: the reference near-black, catalog variants by catalog position (the
    same colour in every report), other names after them in sorted order."""
    colorblind, dark = sns.color_palette("colorblind", 10), sns.color_palette("dark", 10)
    # Without colorblind's grey (index 7), too close to the reference's near-black in the performance
    # profile's panels, and its pale yellow (8), unreadable as text on white; then the dark palette,
    # deep purple and navy first (the two least like the first eight).
    palette = [*colorblind[:7], colorblind[9], *(dark[i] for i in (4, 0, 2, 3, 1, 5, 6, 7, 8, 9))]
    catalog = [v for v in CATALOG if v != reference]
    others = sorted(set(variants) - set(catalog) - {reference})
    if len(catalog) + len(others) > len(palette):  # many unknown names: evenly spaced hues
        palette += sns.color_palette("husl", len(catalog) + len(others) - len(palette))
    colors = {name: tuple(palette[i]) for i, name in enumerate([*catalog, *others])}
    colors[reference] = (0.13, 0.13, 0.13)
    return {v: colors[v] for v in loading.variant_order(variants)}


def _mpl(text: str) -> str:
    """Text for matplotlib: a '$' would start mathtext (and a lone one fails to render)."""
    return str(text).replace("$", r"\$")


def file_slug(name: str) -> str:
    """A file-name-safe form of `name`, suffixed with a hash when characters had to be replaced."""
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("._")[:60]
    if slug != name:
        slug = f"{slug}-{zlib.crc32(name.encode('utf-8')):08x}"
    return slug


@dataclass(frozen=True)
class FigureFile:
    """A figure written beside index.html."""

    filename: str
    section: str  # heading it goes under
    title: str
    caption: str


def _save(fig: Figure, out_dir: Path, filename: str) -> None:
    buffer = io.BytesIO()
    # Software-only metadata: the same data gives the same PNG bytes.
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    records.atomic_write_bytes(out_dir / filename, buffer.getvalue())


def _variant_legend(
    fig: Figure, variants: Sequence[str], colors: Mapping[str, Any], extra: Sequence[tuple[Any, str]] = ()
) -> None:
    handles = [Line2D([], [], color=colors[v], linewidth=2.5) for v in variants]
    labels = [_mpl(v) for v in variants]
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    if handles:
        fig.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=min(4, len(handles)),
            frameon=False,
            fontsize="medium",
        )


# --- figures -------------------------------------------------------------------------------------


def draw_figures(
    out_dir: Path,
    runs: pd.DataFrame,
    scores: pd.DataFrame,
    summary: pd.DataFrame,
    verdicts: pd.DataFrame,
    curves: pd.DataFrame,
    diagnostics: pd.DataFrame,
    colors: Mapping[str, Any],
    reference: str,
    reps: int,
) -> list[FigureFile]:
    figures: list[FigureFile] = []
    envs = loading.env_order(runs["env"].tolist())
    # rc_context restores matplotlib's global style afterwards, whatever seaborn's theme changed.
    with plt.rc_context():
        sns.set_theme(style="whitegrid", context="notebook")
        for env in envs:
            figures += plot_learning_curves(out_dir, env, curves[curves["env"] == env], colors)
        for metric in stats.RETURN_METRICS:
            figures += plot_aggregate_intervals(out_dir, summary, metric, colors)
        final = verdicts[verdicts["metric"] == "final_return"]
        for env in envs:
            figures += plot_paired_differences(out_dir, env, runs, scores, final, colors, reference)
        figures += plot_performance_profile(out_dir, scores, colors, reps, reference)
        figures += plot_probability_of_improvement(out_dir, final, envs, colors, reference)
        for env in envs:
            figures += plot_diagnostics(out_dir, env, diagnostics[diagnostics["env"] == env], colors)
        figures += plot_run_states(out_dir, runs, colors)
    return figures


def plot_learning_curves(out_dir: Path, env: str, curves: pd.DataFrame, colors: Mapping[str, Any]) -> list[FigureFile]:
    """IQM across complete runs of the evaluation return vs env steps, one line and 95% band per variant."""
    if curves.empty:
        return []
    fig, ax = plt.subplots(figsize=(8, 4.8))
    variants = loading.variant_order(curves["variant"].tolist())
    for variant in variants:
        cell = curves[curves["variant"] == variant]
        ax.plot(cell["env_step"], cell["iqm"], color=colors[variant], linewidth=2, marker="o", markersize=3)
        ax.fill_between(
            cell["env_step"], cell["ci_low"], cell["ci_high"], color=colors[variant], alpha=0.18, linewidth=0
        )
    extra = []
    if normalization.can_normalize(env):
        for value, style, label in (
            (normalization.R_TARGET[env], "--", "target"),
            (normalization.R_RANDOM[env], ":", "uniform random policy"),
        ):
            ax.axhline(value, color="grey", linestyle=style, linewidth=1)
            extra.append((Line2D([], [], color="grey", linestyle=style), f"{label} ({value:g})"))
    ax.set_title(_mpl(f"{env}: evaluation return (IQM over complete runs, 95% CI)"))
    ax.set_xlabel("environment steps")
    ax.set_ylabel("deterministic evaluation return")
    _variant_legend(fig, variants, colors, extra)
    filename = f"learning_curves_{file_slug(env)}.png"
    _save(fig, out_dir, filename)
    return [
        FigureFile(
            filename,
            "Learning curves",
            f"Learning curves: {env}",
            "Interquartile mean across complete runs of the mean deterministic evaluation return; "
            "band: pointwise 95% stratified bootstrap interval.",
        )
    ]


def plot_aggregate_intervals(
    out_dir: Path, summary: pd.DataFrame, metric: str, colors: Mapping[str, Any]
) -> list[FigureFile]:
    """rliable's interval-estimate plot of the env='all' aggregates of `metric` (normalized scores)."""
    fig = aggregate_intervals_figure(summary, metric, colors)
    if fig is None:
        return []
    filename = f"aggregate_{metric}.png"
    _save(fig, out_dir, filename)
    return [
        FigureFile(
            filename,
            "Aggregate estimates",
            f"Aggregates over environments: {metric}",
            f"{metric} normalized per environment, pooled over the environments each variant has complete "
            "runs in (see the summary table); bars: 95% stratified bootstrap intervals, tick: point estimate; "
            "n: runs per variant (with few runs a bootstrap interval spans little more than their own values).",
        )
    ]


# rliable places the x label at a figure fraction, but the tick labels above it have a fixed height in
# inches; the label goes this far (inches) below the axes so it clears them whatever the row count.
_AGGREGATE_XLABEL_DROP_IN = 0.7


def aggregate_intervals_figure(summary: pd.DataFrame, metric: str, colors: Mapping[str, Any]) -> Figure | None:
    """The aggregate interval figure of `metric`, unsaved; None when the summary has no env='all' rows for it."""
    pooled = summary[(summary["env"] == stats.ALL_ENVS) & summary["metric"].str.startswith(f"{metric}_")]
    if pooled.empty:
        return None
    variants = loading.variant_order(pooled["variant"].tolist())
    row_labels = {v: _mpl(label) for v, label in aggregate_row_labels(pooled).items()}
    names = [f"{metric}_{a}" for a in stats.AGGREGATES]
    points, intervals = {}, {}
    for variant in variants:
        rows = pooled[pooled["variant"] == variant].set_index("metric").reindex(names)
        points[row_labels[variant]] = rows["estimate"].to_numpy(dtype=np.float64)
        intervals[row_labels[variant]] = rows[["ci_low", "ci_high"]].to_numpy(dtype=np.float64).T
    labels = ["IQM", "Mean", "Median", "Optimality gap\n(lower is better)"]
    row_height = max(0.45, 2.4 / len(variants))
    height_in = row_height * len(variants)
    axes_bottom = plt.rcParams["figure.subplot.bottom"]
    fig, _ = plot_utils.plot_interval_estimates(
        points,
        intervals,
        metric_names=labels,
        algorithms=[row_labels[v] for v in variants],
        colors={row_labels[v]: colors[v] for v in variants},
        xlabel=f"normalized {metric} (0 = random policy, 1 = target)",
        row_height=row_height,
        subfigure_width=3.6,
        max_ticks=3,
        xlabel_y_coordinate=axes_bottom - _AGGREGATE_XLABEL_DROP_IN / height_in,
    )
    return fig


def aggregate_row_labels(pooled: pd.DataFrame) -> dict[str, str]:
    """Each variant's row label in the aggregate figure: its name and run count, as the summary table writes it.

    `pooled`: summary rows (columns variant, n_runs), any number per variant. The count is on the figure
    because a bootstrap interval over two runs spans only their values and would otherwise look as sure
    as one over ten.
    """
    counts = pooled.groupby("variant", sort=False)["n_runs"].max()
    return {str(variant): f"{variant} (n {int(n)})" for variant, n in counts.items()}


def plot_paired_differences(
    out_dir: Path,
    env: str,
    runs: pd.DataFrame,
    scores: pd.DataFrame,
    verdicts: pd.DataFrame,
    colors: Mapping[str, Any],
    reference: str,
) -> list[FigureFile]:
    """Per variant: each seed's final-return difference from the reference's run of that seed (dots), the
    simultaneous interval of the mean difference (bar) and the equivalence band, in the verdicts' units."""
    tested = verdicts[(verdicts["env"] == env) & verdicts["ci_low"].notna()]
    if tested.empty:
        return []
    variants = loading.variant_order(tested["variant"].tolist())
    units = tested["units"].iloc[0]
    margin = tested["margin"].iloc[0]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.5 * len(variants)))
    if units == "normalized" and not np.isnan(margin):
        ax.axvspan(-margin, margin, color="#b8d8b0", alpha=0.45, linewidth=0)
    ax.axvline(0.0, color="grey", linewidth=1)
    for row, variant in enumerate(variants):
        v = tested[tested["variant"] == variant].iloc[0]
        mine = runs[(runs["env"] == env) & (runs["variant"] == variant)]
        if (mine["state"] != "complete").all():
            # Every run stopped: its failure scores would set the axis and flatten every other row.
            ax.text(
                0.0,
                row,
                f"  every run failed or diverged ({v['verdict']}; see Failure rates)",
                va="center",
                fontsize="small",
                color="dimgrey",
            )
            continue
        diffs = stats.paired_differences(scores, env, variant, reference, "final_return", units == "normalized")
        ax.plot(
            [v["ci_low"], v["ci_high"]],
            [row, row],
            color=colors[variant],
            linewidth=5,
            alpha=0.6,
            solid_capstyle="butt",
        )
        ax.plot([v["difference"]], [row], marker="|", markersize=16, markeredgewidth=2, color="black")
        jitter = np.linspace(-0.18, 0.18, len(diffs)) if len(diffs) > 1 else np.zeros(len(diffs))
        ax.scatter(
            list(diffs.values()), row + jitter, s=16, color=colors[variant], edgecolor="black", linewidth=0.4, zorder=3
        )
        ax.text(
            1.01, row, v["verdict"], transform=ax.get_yaxis_transform(), va="center", fontsize="small", color="dimgrey"
        )
    ax.set_yticks(range(len(variants)), [_mpl(v) for v in variants])
    for label, variant in zip(ax.get_yticklabels(), variants):
        label.set_color(colors[variant])
    ax.set_ylim(len(variants) - 0.5, -0.5)  # the first variant on top; half a row around each row's dots
    unit_text = "normalized final return" if units == "normalized" else "final return"
    ax.set_xlabel(_mpl(f"{unit_text}: variant - {reference}, per seed"))
    ax.set_title(_mpl(f"{env}: paired differences from {reference}"))
    filename = f"paired_differences_{file_slug(env)}.png"
    _save(fig, out_dir, filename)
    family = int(tested["family_size"].iloc[0])
    method = str(tested["method"].iloc[0]) if "method" in tested and tested["method"].iloc[0] else "Bonferroni"
    band = (
        f" Green band: the equivalence margin (+-{margin:g} normalized)."
        if units == "normalized" and not np.isnan(margin)
        else ""
    )
    return [
        FigureFile(
            filename,
            "Verdicts",
            f"Paired differences: {env}",
            f"Dots: one per seed, the variant's final return minus the reference's run of the same seed (the "
            f"seeds share their environment and evaluation resets). Bar: the mean difference's simultaneous "
            f"interval ({method} over the report's {family} final-return comparisons, family-wise 95%); "
            f"tick: the mean.{band} The verdict is read off the bar: right of 0 better, left worse, inside "
            f"the band equivalent.",
        )
    ]


def plot_performance_profile(
    out_dir: Path, scores: pd.DataFrame, colors: Mapping[str, Any], reps: int, reference: str = stats.REFERENCE_NAME
) -> list[FigureFile]:
    """rliable performance profiles of the normalized final return, one small panel per variant beside the reference.

    scores: the report's `stats.seed_scores`."""
    envs = stats.normalizable_envs(scores["env"].tolist())
    if not envs:
        return []
    matrices: dict[str, np.ndarray] = {}
    for variant in loading.variant_order(scores["variant"].tolist()):
        mine = scores[scores["variant"] == variant]
        if all((mine["env"] == e).any() for e in envs):
            matrices[variant] = stats.score_dict(mine, "final_return", envs, normalize=True)[variant]
    if not matrices:
        return []
    finite = np.concatenate([m[~np.isnan(m)] for m in matrices.values()])
    # Thresholds span the observed scores (a margin either side), not a fixed [0, 1]: when every variant
    # ends near the target the profiles differ only in a narrow band, which a [0, 1] axis squeezes flat.
    low, high = float(finite.min()), float(finite.max())
    margin = max(0.05 * (high - low), 0.01)
    taus = np.linspace(low - margin, high + margin, 81)
    profiles, intervals = stats.performance_profiles(matrices, taus, reps)
    others = [v for v in profiles if v != reference] or list(profiles)
    ncols = min(4, len(others))
    nrows = -(-len(others) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols, 2.6 * nrows), sharex=True, sharey=True, squeeze=False)
    for ax, variant in zip(axes.flat, others):
        shown = [v for v in (reference, variant) if v in profiles]
        for v in dict.fromkeys(shown):
            color = "dimgrey" if v == reference else colors[v]
            ax.plot(taus, profiles[v], color=color, linewidth=2)
            ax.fill_between(taus, intervals[v][0], intervals[v][1], color=color, alpha=0.2, linewidth=0)
        for tau, style in ((1.0, "--"), (0.0, ":")):
            if taus[0] <= tau <= taus[-1]:
                ax.axvline(tau, color="grey", linestyle=style, linewidth=1)
        ax.set_title(_mpl(variant), color=colors[variant], fontsize="medium")
        ax.set_xlim(taus[0], taus[-1])
    for ax in axes.flat[len(others) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(r"normalized final return $\tau$")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"runs with score $> \tau$")
    fig.tight_layout()
    _save(fig, out_dir, "performance_profile.png")
    return [
        FigureFile(
            "performance_profile.png",
            "Performance profiles",
            "Performance profiles",
            f"One panel per variant (its colour) beside {reference} (grey): the fraction of runs whose "
            "normalized final return exceeds tau (per environment, averaged over the environments every "
            "variant ran), with 95% stratified bootstrap bands. Failed and diverged runs count at their "
            "failure score. Dotted: random policy (0), dashed: target (1), where they fall in the axis.",
        )
    ]


def plot_probability_of_improvement(
    out_dir: Path, verdicts: pd.DataFrame, envs: Sequence[str], colors: Mapping[str, Any], reference: str
) -> list[FigureFile]:
    """P(variant > reference) with its 95% interval, one panel per env and one over all envs."""
    if verdicts.empty:
        return []
    panels = [*envs, stats.ALL_ENVS]
    variants = loading.variant_order(verdicts["variant"].tolist())
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.2 * len(panels), 0.8 + 0.42 * len(variants)), sharey=True, squeeze=False
    )
    for ax, env in zip(axes[0], panels):
        for row, variant in enumerate(variants):
            match = verdicts[(verdicts["env"] == env) & (verdicts["variant"] == variant)]
            if match.empty:
                continue
            v = match.iloc[0]
            if np.isnan(v["poi"]):
                ax.text(0.5, row, v["verdict"], ha="center", va="center", fontsize="small", color="grey")
                continue
            # A zero-width interval (all resamples agree) still gets a visible sliver.
            width = max(v["poi_ci_high"] - v["poi_ci_low"], 0.012)
            ax.barh(row, width, left=min(v["poi_ci_low"], 1.0 - width), height=0.6, color=colors[variant], alpha=0.75)
            ax.plot([v["poi"]], [row], marker="|", markersize=14, markeredgewidth=2, color="black")
            # A clear verdict in words, in the half of the panel its interval does not touch.
            if v["verdict"] in (stats.BETTER, stats.WORSE):
                right = v["verdict"] == stats.WORSE
                ax.text(
                    0.98 if right else 0.02,
                    row,
                    v["verdict"],
                    ha="right" if right else "left",
                    va="center",
                    fontsize="small",
                    color="dimgrey",
                )
        ax.axvline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xlim(0.0, 1.0)
        ax.set_xticks([0.0, 0.25, 0.5, 0.75, 1.0], ["0", ".25", ".5", ".75", "1"])
        ax.set_ylim(-0.6, len(variants) - 0.4)
        ax.set_title(_mpl("all envs" if env == stats.ALL_ENVS else env), fontsize="medium")
        ax.set_xlabel(_mpl(f"P(variant > {reference})"))
    axes[0][0].set_yticks(range(len(variants)))
    axes[0][0].set_yticklabels([_mpl(v) for v in variants])
    for label, variant in zip(axes[0][0].get_yticklabels(), variants):
        label.set_color(colors[variant])
    axes[0][0].invert_yaxis()
    fig.subplots_adjust(wspace=0.1)
    _save(fig, out_dir, "probability_of_improvement.png")
    return [
        FigureFile(
            "probability_of_improvement.png",
            "Probability of improvement",
            f"Probability of improvement over {reference}",
            "P(a complete run of the variant has a higher final return than one of the reference), with its "
            "95% stratified bootstrap interval. Entirely right of 0.5: better; entirely left: worse.",
        )
    ]


def plot_diagnostics(out_dir: Path, env: str, diagnostics: pd.DataFrame, colors: Mapping[str, Any]) -> list[FigureFile]:
    """Learner diagnostics over training, mean across seeds per variant (runs of every state)."""
    if diagnostics.empty:
        return []
    columns = list(loading.PLOTTED_DIAGNOSTICS)
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5), sharex=True)
    variants = loading.variant_order(diagnostics["variant"].tolist())
    for ax, column in zip(axes.ravel(), columns):
        for variant in variants:
            cell = diagnostics[diagnostics["variant"] == variant]
            # Markers only on short series: a run with one diagnostics row would otherwise draw nothing.
            ax.plot(
                cell["env_step"],
                cell[column],
                color=colors[variant],
                linewidth=1.6,
                marker="o" if len(cell) <= 30 else None,
                markersize=3,
            )
        values = diagnostics[column].to_numpy(dtype=np.float64)
        values = values[np.isfinite(values)]
        if column in LOG_SCALE_DIAGNOSTICS and values.size and (values > 0).all() and values.max() > 20 * values.min():
            ax.set_yscale("log")
        else:
            ax.ticklabel_format(axis="y", useOffset=False)  # plain values, no "1e-5 + 6.7e-1" offset
        ax.set_title(DIAGNOSTIC_TITLES.get(column, column), fontsize="medium")
    for ax in axes[1]:
        ax.set_xlabel("environment steps")
    fig.suptitle(_mpl(f"{env}: learner diagnostics (mean across seeds, all runs)"))
    fig.subplots_adjust(hspace=0.28, wspace=0.25)
    _variant_legend(fig, variants, colors)
    filename = f"diagnostics_{file_slug(env)}.png"
    _save(fig, out_dir, filename)
    return [
        FigureFile(
            filename,
            "Diagnostics",
            f"Diagnostics: {env}",
            "Each point: the mean over a diagnostics interval's gradient updates, averaged across seeds "
            "(runs of every state, non-finite values left out). Lines of failed or diverged runs stop early.",
        )
    ]


def plot_run_states(out_dir: Path, runs: pd.DataFrame, colors: Mapping[str, Any]) -> list[FigureFile]:
    """Runs per state (complete / diverged / failed), one horizontal stacked bar per variant and env."""
    if runs.empty:
        return []
    envs = loading.env_order(runs["env"].tolist())
    variants = loading.variant_order(runs["variant"].tolist())
    counts = runs.groupby(["env", "variant", "state"]).size()
    fig, axes = plt.subplots(
        1, len(envs), figsize=(3.4 * len(envs) + 1.5, 0.8 + 0.4 * len(variants)), sharey=True, squeeze=False
    )
    for ax, env in zip(axes[0], envs):
        for row, variant in enumerate(variants):
            left = 0
            for state in records.STATES:
                n = int(counts.get((env, variant, state), 0))
                if n:
                    ax.barh(row, n, left=left, color=STATE_COLORS[state], height=0.65)
                    ax.text(left + n / 2, row, str(n), ha="center", va="center", color="white", fontsize="small")
                    left += n
        ax.set_title(_mpl(env), fontsize="medium")
        ax.set_xlabel("runs")
        ax.set_ylim(-0.6, len(variants) - 0.4)
    axes[0][0].set_yticks(range(len(variants)))
    axes[0][0].set_yticklabels([_mpl(v) for v in variants])
    for label, variant in zip(axes[0][0].get_yticklabels(), variants):
        label.set_color(colors[variant])
    axes[0][0].invert_yaxis()
    axes[0][-1].legend(
        [Patch(color=STATE_COLORS[s]) for s in records.STATES],
        list(records.STATES),
        loc="center left",
        bbox_to_anchor=(1.02, 0.5),
        frameon=False,
    )
    _save(fig, out_dir, "run_states.png")
    return [
        FigureFile(
            "run_states.png",
            "Run states",
            "Run states",
            "Runs per state; failed and diverged runs are listed with their reasons above and kept out of "
            "every aggregate.",
        )
    ]
