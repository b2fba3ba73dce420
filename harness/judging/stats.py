"""Statistics over run records: which runs count, aggregate estimates with bootstrap intervals, verdicts.

Data flows one way: run records (results/README.md, read by `loading`) -> this module -> the report. Nothing here
imports a learner or torch.

The score contract follows rliable: a *score dict* maps a name (a variant) to an array of shape
`(runs, tasks)`, one column per environment. Environments may hold different numbers of complete runs
(a partial grid, or runs that failed), so a column is padded with NaN below its last run; NaN always
means "no run", never a score. Every estimator resamples each task's runs independently (rliable's
stratified bootstrap), so a ragged grid needs no run to be invented or dropped. On a rectangular
grid without NaN every estimate equals rliable's own metric.

Bootstrap intervals come from `rliable.library.get_interval_estimates`, which draws from numpy's
*global* generator whatever `random_state` says; each call therefore runs inside
`seeded_global_numpy`, seeded from a stable hash of what it estimates, so the same records always
give the same numbers (and adding one variant leaves every other variant's intervals unchanged).
"""

from __future__ import annotations

import contextlib
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rliable import library as rly

from ..records import STATES
from . import inference, normalization
from .loading import PLOTTED_DIAGNOSTICS, RunRecords, env_order, sort_runs, variant_order

# --- constants -----------------------------------------------------------------------------------

DEFAULT_REPS = 2000  # bootstrap replications; rliable's papers use 2,000 and up
CONFIDENCE = 0.95
BASE_SEED = 20_240_601  # base of every bootstrap seed (any fixed number works)
# A verdict needs a spread estimate on each side (or of the per-seed differences): with 2 runs the
# t interval has 1 degree of freedom and detects nothing smaller than many standard deviations, so
# below 3 runs a side no verdict is given.
MIN_RUNS_FOR_VERDICT = 3

RETURN_METRICS = ("final_return", "auc_return")  # the per-run scores the report aggregates
AGGREGATES = ("iqm", "mean", "median", "optimality_gap")
REFERENCE_NAME = "reference"  # the variant every other is compared with, unless told otherwise
ALL_ENVS = "all"  # the env label of aggregates over environments (on normalized scores)

# Verdict labels (harness.judging.inference gives the rule).
BETTER = inference.BETTER
WORSE = inference.WORSE
EQUIVALENT = inference.EQUIVALENT
NO_DIFFERENCE = inference.NO_DIFFERENCE
NO_REFERENCE = "no reference"
TOO_FEW_RUNS = "too few runs"


ScoreDict = dict[str, np.ndarray]  # {name: (runs, tasks) float array}, NaN = no run


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float

    def contains(self, value: float, tol: float = 1e-12) -> bool:
        return self.low - tol <= value <= self.high + tol


def not_complete_text(runs: pd.DataFrame, variant: str, env: str) -> str:
    """'2 failed, 1 diverged' for the variant's runs in `env` (all envs for `ALL_ENVS`), '' if none."""
    mine = runs[(runs["variant"] == variant) & ((runs["env"] == env) | (env == ALL_ENVS))]
    return ", ".join(
        f"{int((mine['state'] == s).sum())} {s}" for s in STATES if s != "complete" and (mine["state"] == s).any()
    )


# --- which runs count ----------------------------------------------------------------------------


def complete_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that trained their whole budget."""
    return runs[runs["state"] == "complete"]


def counted_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that enter aggregates and verdicts: those with a score (complete runs, and the failed or
    diverged runs that `score_failures` scored)."""
    return runs.dropna(subset=list(RETURN_METRICS))


def failure_floor(env: str, runs: pd.DataFrame, metric: str) -> float:
    """The return a failed or diverged run of `env` counts at, from where it stopped: a uniform random
    policy's, or, for an env without that constant, the lowest finite `metric` of the env's complete runs
    (NaN when there is none: such a run cannot be scored)."""
    if env in normalization.R_RANDOM:
        return normalization.R_RANDOM[env]
    complete = complete_runs(runs[runs["env"] == env])[metric].astype(float)
    complete = complete[np.isfinite(complete)]
    return float(complete.min()) if len(complete) else math.nan


def needs_scoring(runs: pd.DataFrame) -> pd.Series:
    """Boolean `(len(runs),)`: the runs the failure rule scores (not complete, or a non-finite score)."""
    finite = np.isfinite(runs[list(RETURN_METRICS)].astype(float).to_numpy()).all(axis=1)
    return (runs["state"] != "complete") | ~finite


def failure_score(evaluations: Sequence[float], points: int, floor: float) -> tuple[float, float]:
    """(final_return, auc_return) of a failed or diverged run by the one failure rule.

    evaluations: `(k,)` mean returns of the evaluations it recorded, in step order (any of them NaN or
    infinite where the policy diverged); points: the budget's evaluation points (>= k). Every missing or
    non-finite evaluation counts at `floor` (a random policy's return): auc_return is the mean over the
    `points` evaluations so filled; final_return is the lower of its last finite evaluation and `floor`
    (`floor` if it has none). Both are finite whenever `floor` is.
    """
    values = np.asarray(evaluations, dtype=np.float64)
    finite = values[np.isfinite(values)]
    filled = np.where(np.isfinite(values), values, floor)
    filled = np.concatenate([filled, np.full(max(0, points - values.size), floor)])
    final = min(float(finite[-1]), floor) if finite.size else floor
    return final, float(filled.mean()) if filled.size else floor


def score_failures(
    runs: pd.DataFrame, eval_curves: pd.DataFrame, configs: Mapping[tuple[str, str, int], dict]
) -> pd.DataFrame:
    """`runs` with every failed or diverged run scored by `failure_score`, so that a variant is not judged on
    its survivors and no score is NaN or infinite.

    A run is scored when it did not complete or when a score of it is not finite (a NaN or infinite
    evaluation); its evaluations come from `eval_curves`, its evaluation points from its config's budget.
    Complete runs with finite scores are unchanged. A column `scored` says which rows were filled
    ('failure'); only a run of an env with no floor at all (`failure_floor` NaN) stays unscored.
    """
    out = runs.copy()
    out["scored"] = ""
    todo = needs_scoring(out)
    curves = eval_curves.sort_values("env_step").groupby(["env", "variant", "seed"])["return_mean"]
    for i, row in out[todo].iterrows():
        floor = failure_floor(row["env"], runs, "final_return")
        if math.isnan(floor):
            continue  # no way to score it: left out, and the failure table still counts it
        key = (row["env"], row["variant"], int(row["seed"]))
        means = curves.get_group(key).astype(float).tolist() if key in curves.groups else []
        budget = configs.get(key, {}).get("budget", {})
        points = int(budget.get("eval_points", len(means)) or len(means))
        out.at[i, "final_return"], out.at[i, "auc_return"] = failure_score(means, points, floor)
        out.at[i, "scored"] = "failure"
    return out


def scored_runs(records: RunRecords) -> pd.DataFrame:
    """`records.runs` with failed and diverged runs scored (`score_failures`): what statistics judge."""
    return score_failures(records.runs, records.eval_curves, records.configs)


# --- score dicts ---------------------------------------------------------------------------------


def score_dict(scores: pd.DataFrame, metric: str, envs: Sequence[str], normalize: bool = False) -> ScoreDict:
    """`{variant: (max_runs, len(envs)) array}` of `metric` from a `seed_scores` frame (the counted runs).

    Column j holds the runs of `envs[j]` (sorted by seed), NaN-padded below; a variant with no counted
    run in some env of `envs` gets an all-NaN column there. `normalize` reads the normalized scores
    (every env must then have constants), else the raw ones.
    """
    missing = [env for env in envs if normalize and not normalization.can_normalize(env)]
    if missing:
        raise KeyError(
            f"no normalization constants for {missing[0]!r}; known: {', '.join(sorted(normalization.R_TARGET))}"
        )
    mine = scores[scores["metric"] == metric]
    out: ScoreDict = {}
    for variant in variant_order(mine["variant"].tolist()):
        columns = []
        for env in envs:
            cell = mine[(mine["variant"] == variant) & (mine["env"] == env)].sort_values("seed")
            columns.append(cell["normalized" if normalize else "raw"].to_numpy(dtype=np.float64))
        height = max((len(c) for c in columns), default=0)
        matrix = np.full((height, len(envs)), np.nan)
        for j, column in enumerate(columns):
            matrix[: len(column), j] = column
        out[variant] = matrix
    return out


def task_columns(scores: np.ndarray) -> list[np.ndarray]:
    """The runs of each task of a `(runs, tasks)` array as `(n_task_runs, 1)` arrays, NaN padding removed.

    Raises ValueError if a task has no run: an estimator over tasks needs every task.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"expected a (runs, tasks) array, got shape {scores.shape}")
    columns = []
    for j in range(scores.shape[1]):
        column = scores[:, j][~np.isnan(scores[:, j])]
        if column.size == 0:
            raise ValueError(f"task {j} has no runs")
        columns.append(column[:, None])
    return columns


# --- aggregate metrics over ragged tasks -----------------------------------------------------------
# Each takes the per-task columns, `(n_t, 1)` arrays. On equal run counts they equal rliable's
# aggregate_iqm / aggregate_mean / aggregate_median / aggregate_optimality_gap.


def interquartile_mean(scores: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """25% trimmed mean, computed exactly as `scipy.stats.trim_mean(scores, 0.25, axis)` (rliable's IQM).

    The same partition-then-mean steps without scipy's per-call argument handling: a bootstrap calls this
    once per replication, and on a few seeds that handling, not the arithmetic, would be most of the
    work. scores: any shape; axis=None pools every element.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if axis is None:
        scores, axis = scores.ravel(), 0
    n = scores.shape[axis]
    low = int(0.25 * n)
    high = n - low
    if low >= high:
        raise ValueError("interquartile mean of an empty array")
    part = np.partition(scores, (low, high - 1), axis)
    return np.mean(np.take(part, np.arange(low, high), axis=axis), axis=axis)


def ragged_iqm(*tasks: np.ndarray) -> float:
    """Interquartile mean (25% trimmed mean) of all runs of all tasks pooled, as rliable's aggregate_iqm."""
    return float(interquartile_mean(np.concatenate([t.ravel() for t in tasks])))


def _task_means(tasks: Sequence[np.ndarray]) -> np.ndarray:
    # sum/size rather than np.mean: a bootstrap calls this thousands of times.
    return np.array([t.sum() / t.size for t in tasks])


def ragged_mean(*tasks: np.ndarray) -> float:
    """Mean over tasks of each task's mean score."""
    return float(_task_means(tasks).mean())


def ragged_median(*tasks: np.ndarray) -> float:
    """Median of all runs of all tasks pooled (the same pooling as `ragged_iqm`): with one task, the median
    run. (rliable's aggregate_median, the median of per-task means, is the mean when there is one task.)"""
    return float(np.median(np.concatenate([t.ravel() for t in tasks])))


def ragged_optimality_gap(*tasks: np.ndarray, gamma: float = 1.0) -> float:
    """`gamma - mean(min(score, gamma))`, the mean taken per task then over tasks: how far below `gamma`."""
    return float(gamma - _task_means([np.minimum(t, gamma) for t in tasks]).mean())


# --- bootstrap -----------------------------------------------------------------------------------


@contextlib.contextmanager
def seeded_global_numpy(seed: int) -> Iterator[None]:
    """Seed numpy's global generator for the block, then restore its previous state.

    rliable's bootstraps draw from `np.random` directly and ignore their `random_state` argument.
    """
    saved = np.random.get_state()
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        np.random.set_state(saved)


def stable_seed(*parts: object, base: int = BASE_SEED) -> int:
    """A seed that depends only on `parts` (not on call order or Python's hash randomization)."""
    text = "\x1f".join(str(p) for p in parts)
    return (zlib.crc32(text.encode("utf-8")) ^ base) % 2**32


def _interval_estimates(
    arrays: Sequence[np.ndarray], func: Callable[..., np.ndarray], reps: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """rliable's stratified bootstrap of `func(*arrays)`, each array's runs resampled independently.

    arrays: `(n_i, ...)` arrays. func returns a 1-D array of K statistics.
    Returns the point estimates, shape (K,), and the percentile intervals, shape (2, K) (low, high).
    """
    if reps < 1:
        raise ValueError("reps must be positive")
    with seeded_global_numpy(seed):
        points, intervals = rly.get_interval_estimates(
            {"scores": list(arrays)}, func, reps=reps, confidence_interval_size=CONFIDENCE
        )
    return np.asarray(points["scores"], dtype=np.float64), np.asarray(intervals["scores"], dtype=np.float64)


def aggregate_metric_names(gamma: float | None) -> tuple[str, ...]:
    """The aggregates computed for a given optimality-gap threshold (no gap without a threshold)."""
    return AGGREGATES if gamma is not None else tuple(a for a in AGGREGATES if a != "optimality_gap")


def aggregate_intervals(
    scores: np.ndarray, gamma: float | None = 1.0, reps: int = DEFAULT_REPS, seed: int = BASE_SEED
) -> dict[str, Interval]:
    """IQM, mean, median and optimality gap (at `gamma`) of one `(runs, tasks)` array, with 95% intervals.

    scores: `(runs, tasks)`, NaN = no run; every task needs at least one run.
    gamma: the optimality-gap threshold in the scores' units (1.0 on normalized scores, R_target on an
        env's raw returns); None leaves the gap out.
    Returns `{aggregate name: Interval}` over `aggregate_metric_names(gamma)`.
    """
    names = aggregate_metric_names(gamma)
    columns = task_columns(scores)

    def statistics(*tasks: np.ndarray) -> np.ndarray:
        values = [ragged_iqm(*tasks), ragged_mean(*tasks), ragged_median(*tasks)]
        if gamma is not None:
            values.append(ragged_optimality_gap(*tasks, gamma=gamma))
        return np.array(values)

    points, intervals = _interval_estimates(columns, statistics, reps, seed)
    return {
        name: Interval(float(points[k]), float(intervals[0, k]), float(intervals[1, k])) for k, name in enumerate(names)
    }


def pairwise_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(x > y) over all pairs of a run of X and a run of Y on one task, a tie counting one half.

    scores_x: `(n_x,)` or `(n_x, 1)`; scores_y: `(n_y,)` or `(n_y, 1)`. This is the Mann-Whitney U of X
    divided by n_x * n_y, i.e. rliable's `metrics.probability_of_improvement` on one task (identical
    samples give 0.5 both ways), without scipy's per-call overhead, which a bootstrap would pay once per
    replication for a comparison of a handful of runs.
    """
    x = np.asarray(scores_x, dtype=np.float64).ravel()[:, None]
    y = np.asarray(scores_y, dtype=np.float64).ravel()[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def probability_of_improvement(
    scores_x: np.ndarray, scores_y: np.ndarray, reps: int = DEFAULT_REPS, seed: int = BASE_SEED
) -> Interval:
    """P(X > Y): the probability that a run of X beats a run of Y on the same task, averaged over tasks.

    scores_x, scores_y: `(runs_x, tasks)` and `(runs_y, tasks)`, the same tasks in the same order; NaN =
        no run, every task needs a run on both sides.
    Per task it is rliable's `metrics.probability_of_improvement` (Mann-Whitney U / (n_x n_y), ties
    counting one half), computed by `pairwise_improvement` (same value, no scipy call per replication);
    the interval is rliable's stratified independent bootstrap over both sides.
    """
    x_columns, y_columns = task_columns(scores_x), task_columns(scores_y)
    if len(x_columns) != len(y_columns):
        raise ValueError(f"X has {len(x_columns)} tasks, Y has {len(y_columns)}")
    n_tasks = len(x_columns)

    def poi(*arrays: np.ndarray) -> np.ndarray:
        per_task = [pairwise_improvement(arrays[t], arrays[n_tasks + t]) for t in range(n_tasks)]
        return np.array([np.mean(per_task)])

    points, intervals = _interval_estimates([*x_columns, *y_columns], poi, reps, seed)
    return Interval(float(points[0]), float(intervals[0, 0]), float(intervals[1, 0]))


def performance_profiles(
    scores: ScoreDict, taus: np.ndarray, reps: int = DEFAULT_REPS, seed: int = BASE_SEED
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Score distributions: the fraction of runs scoring above each threshold, with 95% intervals.

    scores: `{name: (runs, tasks)}`, NaN = no run. taus: `(T,)` thresholds.
    Returns `{name: (T,)}` profiles and `{name: (2, T)}` intervals. The fraction is taken per task and
    averaged over tasks (rliable's `score_distributions` when the tasks have equal run counts).
    """
    taus = np.asarray(taus, dtype=np.float64)

    def profile(*tasks: np.ndarray) -> np.ndarray:
        return np.mean([np.mean(t.reshape(-1, 1) > taus[None, :], axis=0) for t in tasks], axis=0)

    profiles, intervals = {}, {}
    for name, matrix in scores.items():
        profiles[name], intervals[name] = _interval_estimates(
            task_columns(matrix), profile, reps, stable_seed("profile", name, seed)
        )
    return profiles, intervals


# --- tables --------------------------------------------------------------------------------------


def normalizable_envs(envs: Sequence[str]) -> list[str]:
    """The envs of `envs` (in benchmark order) with normalization constants: the ones env='all' pools."""
    return [e for e in env_order(envs) if normalization.can_normalize(e)]


def summary_table(runs: pd.DataFrame, reps: int = DEFAULT_REPS, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """IQM, mean, median and optimality gap of final_return and auc_return, with 95% bootstrap intervals.

    Rows per (env, variant) on raw returns (optimality gap at the env's R_target, left out for an env
    without one), then per variant with env='all' on normalized scores pooled over the normalizable
    envs, the same envs for every variant (a variant without runs in one of them gets no 'all' row).
    The counted runs enter (`counted_runs`: complete ones, and failed or diverged ones once
    `score_failures` has scored them); a variant without any in an env has no row there.
    Columns: env, variant, metric ('<final_return|auc_return>_<aggregate>'), estimate, ci_low, ci_high, n_runs.
    scores: the runs' `seed_scores` (computed here when None: a report passes the one it computed).
    """
    counted = counted_runs(runs)
    scores = seed_scores(runs) if scores is None else scores
    rows: list[tuple] = []
    for env in env_order(counted["env"].tolist()):
        gamma = normalization.R_TARGET.get(env)
        for metric in RETURN_METRICS:
            for variant, matrix in score_dict(scores, metric, [env]).items():
                if np.isnan(matrix).all():
                    continue
                estimates = aggregate_intervals(matrix, gamma, reps, stable_seed(env, variant, metric))
                rows.extend(_summary_rows(env, variant, metric, estimates, int(np.sum(~np.isnan(matrix)))))
    pooled = normalizable_envs(counted["env"].tolist())
    for variant in variant_order(counted["variant"].tolist()):
        mine = counted[counted["variant"] == variant]
        envs = pooled
        if not envs or not all((mine["env"] == e).any() for e in envs):
            continue
        for metric in RETURN_METRICS:
            matrix = score_dict(scores[scores["variant"] == variant], metric, envs, normalize=True)[variant]
            estimates = aggregate_intervals(matrix, 1.0, reps, stable_seed(ALL_ENVS, variant, metric))
            rows.extend(_summary_rows(ALL_ENVS, variant, metric, estimates, int(np.sum(~np.isnan(matrix)))))
    frame = pd.DataFrame(rows, columns=["env", "variant", "metric", "estimate", "ci_low", "ci_high", "n_runs"])
    return _order_summary(frame)


def _summary_rows(env: str, variant: str, metric: str, estimates: dict[str, Interval], n_runs: int) -> list[tuple]:
    return [(env, variant, f"{metric}_{name}", e.estimate, e.low, e.high, n_runs) for name, e in estimates.items()]


def _order_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows by env (benchmark order, 'all' last), metric (final before auc), variant (catalog order)."""
    envs = {e: i for i, e in enumerate([*env_order([e for e in frame["env"] if e != ALL_ENVS]), ALL_ENVS])}
    variants = {v: i for i, v in enumerate(variant_order(frame["variant"].tolist()))}
    metrics = {f"{m}_{a}": i for i, (m, a) in enumerate((m, a) for m in RETURN_METRICS for a in AGGREGATES)}
    key = pd.DataFrame(
        {"e": frame["env"].map(envs), "m": frame["metric"].map(metrics), "v": frame["variant"].map(variants)}
    )
    return frame.loc[key.sort_values(["e", "m", "v"], kind="stable").index].reset_index(drop=True)


VERDICT_COLUMNS = (
    "env",
    "variant",
    "reference",
    "metric",
    "units",
    "verdict",
    "difference",
    "ci_low",
    "ci_high",
    "p_value",
    "p_adjusted",
    "mdd",
    "seeds_for_target",
    "seeds_for_difference",
    "paired",
    "n_pairs",
    "n_runs",
    "n_reference_runs",
    "negligible",
    "family_size",
    "level",
    "margin",
    "poi",
    "poi_ci_low",
    "poi_ci_high",
    "envs_compared",
    "method",
)
# The dtypes of a verdict table's numeric columns, whatever its rows hold: a column with no value (every
# row None) or of whole numbers would otherwise be object or int.
_FLOAT_COLUMNS = (
    "difference", "ci_low", "ci_high", "p_value", "p_adjusted", "mdd", "seeds_for_target", "seeds_for_difference",
    "margin", "poi", "poi_ci_low", "poi_ci_high",
)  # fmt: skip
VERDICT_DTYPES = {**{c: "float64" for c in _FLOAT_COLUMNS}, "n_runs": "int64", "n_reference_runs": "int64"}


SEED_SCORE_COLUMNS = ("env", "variant", "seed", "metric", "raw", "normalized", "score", "state")


def seed_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """The per-seed scores of a report: the one scoring pass that every table and figure reads.

    runs: scored runs (`scored_runs`: failed and diverged runs carry their failure scores). Call it under
    the normalization constants the report uses (`normalization.extended`).
    Returns a frame of shape `(n_counted * len(RETURN_METRICS), len(SEED_SCORE_COLUMNS))`: one row per
    counted run (`counted_runs`) and return metric, metric by metric, each in the runs' order. Columns:
    env, variant, seed (int), metric (one of `RETURN_METRICS`), raw (the run's score in return units),
    normalized (`normalization.normalized_score` of raw; NaN where the env has no constants), score (the
    units a comparison uses: normalized where the env has constants, raw otherwise), state (the run's
    state: 'complete', or that of a failed or diverged run that `score_failures` scored).
    """
    counted = counted_runs(runs)
    envs = counted["env"].to_numpy(dtype=object)
    can = np.array([normalization.can_normalize(env) for env in envs], dtype=bool)
    frames = []
    for metric in RETURN_METRICS:
        raw = counted[metric].to_numpy(dtype=np.float64)
        normalized = np.full(raw.shape, np.nan)
        for env in dict.fromkeys(envs[can]):
            at = envs == env
            normalized[at] = normalization.normalized_score(raw[at], env)
        columns = {
            "env": envs,
            "variant": counted["variant"].to_numpy(dtype=object),
            "seed": counted["seed"].to_numpy(dtype=np.int64),
            "metric": metric,
            "raw": raw,
            "normalized": normalized,
            "score": np.where(can, normalized, raw),
            "state": counted["state"].to_numpy(dtype=object),
        }
        frames.append(pd.DataFrame(columns, columns=list(SEED_SCORE_COLUMNS)))
    return pd.concat(frames, ignore_index=True)


def cell_scores(
    scores: pd.DataFrame, env: str, variant: str | None, metric: str, units: str = "score"
) -> dict[int, float]:
    """`{seed: value}` of one (env, variant, metric) cell of a `seed_scores` frame, in the runs' order.

    units: the column read: 'score' (normalized where the env has constants), 'raw' or 'normalized'."""
    cell = scores[(scores["env"] == env) & (scores["variant"] == variant) & (scores["metric"] == metric)]
    return dict(zip(cell["seed"].tolist(), cell[units].tolist()))


def paired_differences(
    scores: pd.DataFrame, env: str, variant: str, reference: str, metric: str, normalize: bool
) -> dict[int, float]:
    """`{seed: variant's metric - reference's}` over the seeds both have counted runs of in `env`.

    scores: a `seed_scores` frame; normalized scores when `normalize`, raw ones otherwise."""
    units = "normalized" if normalize else "raw"
    x = cell_scores(scores, env, variant, metric, units)
    y = cell_scores(scores, env, reference, metric, units)
    return {seed: x[seed] - y[seed] for seed in sorted(set(x) & set(y))}


VERDICT_METHODS = (inference.MANY_TO_ONE, inference.BONFERRONI)


def verdict_table(
    runs: pd.DataFrame,
    reference: str = "reference",
    metric: str = "final_return",
    reps: int = DEFAULT_REPS,
    min_runs: int = MIN_RUNS_FOR_VERDICT,
    alpha: float = inference.ALPHA,
    margin: float = inference.EQUIVALENCE_MARGIN,
    target: float = inference.TARGET_DIFFERENCE,
    effect_sizes: bool = True,
    method: str = inference.BONFERRONI,
    draws: int = inference.SIMULTANEOUS_DRAWS,
    scores: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Verdict of every variant but `reference`, per env and pooled over the normalizable envs.

    runs: `RUN_COLUMNS` rows; a run counts when its `metric` is a number (complete runs, and failed or
        diverged runs that `score_failures` scored).
    Per env the difference variant - reference is paired by seed (`inference.compare_by_seed`), in
    normalized score where the env has constants (raw return otherwise, and then no equivalence
    margin). env='all' is the mean over the normalizable envs where both sides have at least
    `min_runs` runs of each env's difference (`inference.pooled_test`); with one such env it is that
    env's comparison, not a second one. Every distinct comparison of the table is one member of the
    family that `inference.decide` holds at family-wise level `alpha`, by `method` (one of
    `VERDICT_METHODS`): Bonferroni (the default: measured to hold on the campaigns' bimodal returns), or
    many-to-one max-t intervals over the comparisons' null correlation (`family_correlation`: they
    share the reference's runs), narrower but measured above 5% on LunarLander-shaped nulls at 5 and 10
    seeds (docs/statistics.md).
    A side with fewer than `min_runs` runs gets 'too few runs'; no reference runs: 'no reference'.
    Columns: `VERDICT_COLUMNS` (n_pairs: the seeds compared pairwise, 0 when unpaired; negligible: the
    interval lies inside the margin, so a better/worse there is real but too small to matter). mdd: the
    difference detected with 80% power at the family's level; seeds_for_target: the seeds that would
    detect `target` at that level; seeds_for_difference: those that would detect the difference seen
    (its absolute value) at that level, at the spread seen: where more seeds could decide it (NaN past
    1,000 seeds, or with no difference). poi: P(a variant run beats a reference run) with its bootstrap
    interval (rliable), an effect size beside the verdict (NaN with `effect_sizes=False`, which skips
    the bootstraps and the seeds search: the verdicts do not use them). method: how the family is held.
    scores: the runs' `seed_scores` (computed here when None: a report passes the one it computed).
    """
    if method not in VERDICT_METHODS:
        raise ValueError(f"unknown verdict method {method!r} (known: {', '.join(VERDICT_METHODS)})")
    scores = seed_scores(runs) if scores is None else scores
    has_reference = bool((scores["variant"] == reference).any())
    cells: list[dict] = []  # one per row, in order; "test" set where a comparison is made
    for variant in [v for v in variant_order(runs["variant"].tolist()) if v != reference]:
        mine = []
        for env in env_order(runs["env"].tolist()):
            if runs[(runs["variant"] == variant) & (runs["env"] == env)].empty:
                continue  # this variant was not run on this env: no row rather than a misleading one
            mine.append(_env_cell(scores, env, variant, reference, metric, min_runs, has_reference))
            if effect_sizes and "test" in mine[-1]:
                x, y = mine[-1]["x"], mine[-1]["y"]
                mine[-1]["poi"] = _poi(x, y, reps, stable_seed("poi", env, variant, reference, metric))
        cells += [*mine, _pooled_cell(scores, mine, variant, reference, metric, has_reference, effect_sizes, reps)]
    family = [r for r in cells if "test" in r and not r.get("alias")]
    correlation = family_correlation(family) if method == inference.MANY_TO_ONE else None
    decisions = inference.decide(
        [r["test"] for r in family], alpha, margin, with_mdd=effect_sizes, correlation=correlation, draws=draws
    )
    by_test = {id(r["test"]): d for r, d in zip(family, decisions)}
    level = decisions[0].level if decisions else inference.family_level(0, alpha)
    rows = [
        _verdict_row(
            r, by_test.get(id(r.get("test"))), reference, metric, margin, len(family), level, target, effect_sizes
        )
        for r in cells
    ]
    frame = pd.DataFrame(rows, columns=list(VERDICT_COLUMNS))
    return frame.astype(VERDICT_DTYPES)


def _env_cell(
    scores: pd.DataFrame, env: str, variant: str, reference: str, metric: str, min_runs: int, has_reference: bool
) -> dict:
    """One env's row of a verdict table before the family is decided: its scores `x`, `y` (`{seed: score}`)
    and, where both sides have `min_runs` runs, its `test`; else its verdict."""
    normalize = normalization.can_normalize(env)
    x = cell_scores(scores, env, variant, metric)
    y = cell_scores(scores, env, reference, metric)
    row = {
        "env": env,
        "variant": variant,
        "n_runs": len(x),
        "n_reference_runs": len(y),
        "units": "normalized" if normalize else "return",
        "envs_compared": env,
        "x": x,
        "y": y,
    }
    if not has_reference or not y:
        row["verdict"] = NO_REFERENCE
    elif min(len(x), len(y)) < min_runs:
        row["verdict"] = TOO_FEW_RUNS
    else:
        row["test"] = inference.compare_by_seed(x, y)
    return row


def _pooled_cell(
    scores: pd.DataFrame,
    env_cells: Sequence[dict],
    variant: str,
    reference: str,
    metric: str,
    has_reference: bool,
    effect_sizes: bool,
    reps: int,
) -> dict:
    """The env='all' row of one variant: the mean of its normalized env comparisons (`env_cells`)."""
    compared = [r for r in env_cells if "test" in r and r["units"] == "normalized"]
    envs = [r["env"] for r in compared]
    pooled = {
        "env": ALL_ENVS,
        "variant": variant,
        "units": "normalized",
        "envs_compared": ";".join(envs),
        "n_runs": sum(r["n_runs"] for r in compared),
        "n_reference_runs": sum(r["n_reference_runs"] for r in compared),
        "parts": compared,
    }
    if not has_reference:
        pooled["verdict"] = NO_REFERENCE
    elif not compared:
        pooled["verdict"] = TOO_FEW_RUNS
    else:
        pooled["test"] = inference.pooled_test([r["test"] for r in compared])
        pooled["alias"] = len(compared) == 1  # the same comparison as its env's row
        if effect_sizes:
            both = score_dict(scores, metric, envs)
            seed = stable_seed("poi", ALL_ENVS, *envs, variant, reference, metric)
            pooled["poi"] = probability_of_improvement(both[variant], both[reference], reps, seed)
    return pooled


def family_correlation(family: Sequence[dict]) -> np.ndarray:
    """The null correlation `(m, m)` of a verdict family's statistics (difference / se).

    family: cells with a `test`; an env cell carries its scores `x`, `y` (`{seed: score}`), a pooled
    cell the env cells it averages (`parts`). Env comparisons of different envs are independent; of one
    env they share the reference's runs: both paired, cov(mean d_v, mean d_w) = n_c / (n_v n_w) times
    the covariance of the per-seed differences over their n_c common seeds (0 below 3 of them); both
    unpaired, the variance of the reference's mean; mixed, 0 (the conservative side of a positive
    correlation). A pooled cell is the mean of its parts, its covariances the matching averages.
    """
    units = []  # env cells, each once
    for cell in family:
        for part in cell.get("parts", [cell]):
            if all(part is not u for u in units):
                units.append(part)
    cov = np.zeros((len(units), len(units)))
    for i, a in enumerate(units):
        for j, b in enumerate(units[: i + 1]):
            cov[i, j] = cov[j, i] = a["test"].se ** 2 if i == j else _shared_covariance(a, b)
    index = {id(u): k for k, u in enumerate(units)}
    weights = np.zeros((len(family), len(units)))  # each statistic as an average of env cells
    for row, cell in enumerate(family):
        parts = cell.get("parts", [cell])
        weights[row, [index[id(p)] for p in parts]] = 1 / len(parts)
    covariance = weights @ cov @ weights.T
    scale = np.sqrt(np.diag(covariance))
    ok = scale > 0
    out = np.eye(len(family))
    out[np.ix_(ok, ok)] = covariance[np.ix_(ok, ok)] / np.outer(scale[ok], scale[ok])
    np.fill_diagonal(out, 1.0)
    return np.clip(out, -1.0, 1.0)


def _shared_covariance(a: dict, b: dict) -> float:
    """cov of two env cells' differences through the reference runs they share (`family_correlation`)."""
    if a["env"] != b["env"] or a["test"].paired != b["test"].paired:
        return 0.0
    y = a["y"]
    if not a["test"].paired:
        values = np.array(list(y.values()), dtype=np.float64)
        return float(np.var(values, ddof=1) / values.size)
    common = sorted(set(a["x"]) & set(b["x"]) & set(y))
    if len(common) < 3:
        return 0.0
    da = np.array([a["x"][s] - y[s] for s in common])
    db = np.array([b["x"][s] - y[s] for s in common])
    n_a, n_b = a["test"].n_x, b["test"].n_x
    return float(len(common) / (n_a * n_b) * np.cov(da, db, ddof=1)[0, 1])


def _verdict_row(
    cell: dict,
    decision: inference.Decision | None,
    reference: str,
    metric: str,
    margin: float,
    family_size: int,
    level: float,
    target: float,
    effect_sizes: bool,
) -> dict:
    """One row of `VERDICT_COLUMNS` from a cell and its decision (None: not a member of the family)."""
    test, poi = cell.get("test"), cell.get("poi")
    # An 'all' row over one env holds that env's Test object, and so reads that env's decision.
    seeds = seen = None
    if decision is not None and effect_sizes:
        if cell["units"] == "normalized":
            seeds = inference.seeds_needed(test, target, level)
        if test.difference != 0 and math.isfinite(test.difference):
            seen = inference.seeds_needed(test, abs(test.difference), level)
    return {
        "env": cell["env"],
        "variant": cell["variant"],
        "reference": reference,
        "metric": metric,
        "units": cell["units"],
        "verdict": decision.verdict if decision else cell["verdict"],
        "difference": test.difference if test else math.nan,
        "ci_low": decision.low if decision else math.nan,
        "ci_high": decision.high if decision else math.nan,
        "p_value": decision.p_value if decision else math.nan,
        "p_adjusted": decision.p_adjusted if decision else math.nan,
        "mdd": decision.mdd if decision else math.nan,
        "seeds_for_target": math.nan if seeds is None else seeds,
        "seeds_for_difference": math.nan if seen is None else seen,
        "paired": bool(test.paired) if test else False,
        "n_pairs": test.n_x if test is not None and test.paired else 0,
        "n_runs": cell["n_runs"],
        "n_reference_runs": cell["n_reference_runs"],
        "negligible": bool(decision.negligible) if decision else False,
        "family_size": family_size,
        "level": level,
        "margin": margin if cell["units"] == "normalized" else math.nan,
        "poi": poi.estimate if poi else math.nan,
        "poi_ci_low": poi.low if poi else math.nan,
        "poi_ci_high": poi.high if poi else math.nan,
        "envs_compared": cell["envs_compared"],
        "method": decision.method if decision else "",
    }


def _poi(x: Mapping[int, float], y: Mapping[int, float], reps: int, seed: int) -> Interval:
    return probability_of_improvement(
        np.array(list(x.values()))[:, None], np.array(list(y.values()))[:, None], reps, seed
    )


def power_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per (metric, env) of a verdict table: how large a difference the design could miss.

    Columns: metric, env, n_compared, mdd_median, mdd_max (over the variants compared there),
    seeds_for_target_median (seeds per variant to detect `inference.TARGET_DIFFERENCE` at the family's
    level, median over variants; NaN where the units are raw returns), units.
    """
    rows = []
    tested = verdicts.dropna(subset=["mdd"])
    # An 'all' row over one environment repeats that environment's comparison.
    tested = tested[(tested["env"] != ALL_ENVS) | tested["envs_compared"].str.contains(";")]
    for (metric, env), cell in tested.groupby(["metric", "env"], sort=False):
        rows.append(
            (
                metric,
                env,
                len(cell),
                float(cell["mdd"].median()),
                float(cell["mdd"].max()),
                float(cell["seeds_for_target"].median()),
                cell["units"].iloc[0],
            )
        )
    return pd.DataFrame(
        rows, columns=["metric", "env", "n_compared", "mdd_median", "mdd_max", "seeds_for_target_median", "units"]
    )


PAIRING_COLUMNS = (
    "env",
    "variant",
    "metric",
    "units",
    "n_pairs",
    "correlation",
    "half_width_paired",
    "half_width_unpaired",
    "ratio",
)


def pairing_table(
    runs: pd.DataFrame, reference: str = "reference", level: float = 0.95, scores: pd.DataFrame | None = None
) -> pd.DataFrame:
    """What pairing by seed buys, per (env, variant, metric): on the seeds both sides have (at least
    `inference.MIN_PAIRS`), the correlation of the two sides' per-seed scores and the half-width of the
    `level` interval of the difference, paired t against Welch's unpaired t on the same runs.

    ratio = half_width_paired / half_width_unpaired: below 1 the seed's shared randomness narrows the
    interval. One comparison's interval (no family correction), in normalized score where the env has
    constants. Counted runs, as in `verdict_table`. Columns: `PAIRING_COLUMNS`.
    scores: the runs' `seed_scores` (computed here when None: a report passes the one it computed).
    """
    scores = seed_scores(runs) if scores is None else scores
    rows = []
    for env in env_order(runs["env"].tolist()):
        normalize = normalization.can_normalize(env)
        ref = {metric: cell_scores(scores, env, reference, metric) for metric in RETURN_METRICS}
        for variant in variant_order(runs.loc[runs["env"] == env, "variant"].tolist()):
            if variant == reference:
                continue
            for metric in RETURN_METRICS:
                xs, ys = inference.aligned_by_seed(cell_scores(scores, env, variant, metric), ref[metric])
                if xs.size < inference.MIN_PAIRS:
                    continue
                paired, unpaired = inference.paired_test(xs, ys), inference.welch_test(xs, ys)
                hp = paired.interval(level)[1] - paired.difference
                hu = unpaired.interval(level)[1] - unpaired.difference
                corr = float(np.corrcoef(xs, ys)[0, 1]) if xs.std() > 0 and ys.std() > 0 else float("nan")
                rows.append(
                    [
                        env,
                        variant,
                        metric,
                        "normalized" if normalize else "return",
                        xs.size,
                        corr,
                        hp,
                        hu,
                        hp / hu if hu > 0 else float("nan"),
                    ]
                )
    return pd.DataFrame(rows, columns=list(PAIRING_COLUMNS))


FAILURE_COLUMNS = ("env", "variant", "failed", "n_runs", "reference_failed", "n_reference_runs", "p_value", "p_holm")


def failure_table(runs: pd.DataFrame, reference: str = "reference") -> pd.DataFrame:
    """Failed or diverged runs per (env, variant) against the reference's, Fisher's exact test, Holm over the table.

    Rows only where the variant or the reference has a run that did not complete.
    Columns: `FAILURE_COLUMNS`.
    """
    rows = []
    for env in env_order(runs["env"].tolist()):
        ref = runs[(runs["env"] == env) & (runs["variant"] == reference)]
        ref_failed = int((ref["state"] != "complete").sum())
        for variant in variant_order(runs.loc[runs["env"] == env, "variant"].tolist()):
            if variant == reference:
                continue
            mine = runs[(runs["env"] == env) & (runs["variant"] == variant)]
            failed = int((mine["state"] != "complete").sum())
            if (failed == 0 and ref_failed == 0) or ref.empty:
                continue
            p = inference.fisher_failures(failed, len(mine), ref_failed, len(ref))
            rows.append([env, variant, failed, len(mine), ref_failed, len(ref), p])
    frame = pd.DataFrame(rows, columns=list(FAILURE_COLUMNS[:-1]))
    frame["p_holm"] = inference.holm(frame["p_value"].to_numpy()) if len(frame) else []
    return frame


def iqm_learning_curves(eval_curves: pd.DataFrame, runs: pd.DataFrame, reps: int = DEFAULT_REPS) -> pd.DataFrame:
    """IQM over complete runs of the evaluation return at each env_step, per (env, variant), with 95% intervals.

    Each evaluation point is a task of rliable's stratified bootstrap, the runs its rows, so the band is
    pointwise. Only env_steps that every complete run of the cell evaluated are kept.
    Columns: env, variant, env_step, iqm, ci_low, ci_high, n_runs.
    """
    complete = complete_runs(runs)[["env", "variant", "seed"]]
    curves = eval_curves.merge(complete, on=["env", "variant", "seed"])
    rows: list[tuple] = []
    for env in env_order(curves["env"].tolist()):
        for variant in variant_order(curves.loc[curves["env"] == env, "variant"].tolist()):
            cell = curves[(curves["env"] == env) & (curves["variant"] == variant)]
            table = cell.pivot_table(
                index="seed", columns="env_step", values="return_mean", aggfunc="first", dropna=False
            )
            table = table.loc[:, table.notna().all(axis=0)]  # steps every run evaluated
            if table.shape[1] == 0:
                continue
            matrix = table.to_numpy(dtype=np.float64)  # (runs, steps)

            def iqm_per_step(scores: np.ndarray) -> np.ndarray:
                return interquartile_mean(scores, axis=0)

            with seeded_global_numpy(stable_seed("curve", env, variant)):
                points, intervals = rly.get_interval_estimates(
                    {"curve": matrix}, iqm_per_step, reps=reps, confidence_interval_size=CONFIDENCE
                )
            for k, step in enumerate(table.columns):
                rows.append(
                    (
                        env,
                        variant,
                        int(step),
                        float(points["curve"][k]),
                        float(intervals["curve"][0, k]),
                        float(intervals["curve"][1, k]),
                        matrix.shape[0],
                    )
                )
    return pd.DataFrame(rows, columns=["env", "variant", "env_step", "iqm", "ci_low", "ci_high", "n_runs"])


FIRST_REACH_COLUMNS = ("env", "variant", "seed", "state", "target", "first_step")
TARGET_COLUMNS = (
    "env",
    "variant",
    "target",
    "n_runs",
    "n_reached",
    "first_step_median",
    "first_step_min",
    "first_step_max",
)


def first_reach_steps(eval_curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per run in an environment with a target return (R_target), the first env_step whose evaluation mean
    return is at or above the target; NaN where no evaluation reached it (censored at the run's last one).

    Every run of `runs` enters, whatever its state: a run that reached the target and later failed did
    reach it. Environments without a target have no rows.
    Columns: env, variant, seed, state, target, first_step.
    """
    keys = ["env", "variant", "seed"]
    at_target = eval_curves["return_mean"] >= eval_curves["env"].map(normalization.R_TARGET)
    first = eval_curves[at_target].groupby(keys)["env_step"].min().astype("float64").rename("first_step")
    with_target = sort_runs(runs[runs["env"].isin(list(normalization.R_TARGET))])
    frame = with_target[[*keys, "state"]].assign(
        target=with_target["env"].map(normalization.R_TARGET).astype("float64")
    )
    frame = frame.merge(first.reset_index(), on=keys, how="left")
    return frame.astype({"seed": "int64"})[list(FIRST_REACH_COLUMNS)].reset_index(drop=True)


def target_table(first_reach: pd.DataFrame) -> pd.DataFrame:
    """How many runs of each (env, variant) reached the target, and at which env_step they first did
    (median, min and max over the runs that reached it; NaN where none did). A descriptive table: it gives
    no verdict, and its rates enter no family.

    first_reach: `first_reach_steps` rows.
    Columns: env, variant, target, n_runs, n_reached, first_step_median, first_step_min, first_step_max.
    """
    rows: list[tuple] = []
    for env in env_order(first_reach["env"].tolist()):
        here = first_reach[first_reach["env"] == env]
        for variant in variant_order(here["variant"].tolist()):
            steps = here.loc[here["variant"] == variant, "first_step"].to_numpy(dtype=np.float64)
            hit = steps[~np.isnan(steps)]
            summary = (np.median(hit), hit.min(), hit.max()) if len(hit) else (np.nan, np.nan, np.nan)
            rows.append((env, variant, float(here["target"].iloc[0]), len(steps), len(hit), *map(float, summary)))
    return pd.DataFrame(rows, columns=list(TARGET_COLUMNS))


LATE_FRACTION = 0.1  # "the end of training": the last tenth of a run's env steps


def late_diagnostics(
    diagnostics: pd.DataFrame,
    runs: pd.DataFrame,
    fraction: float = LATE_FRACTION,
    columns: Sequence[str] = PLOTTED_DIAGNOSTICS,
) -> pd.DataFrame:
    """Each diagnostic at the end of training: per complete run, the mean over its diagnostics intervals
    that end in the last `fraction` of its env steps (env_step > (1 - fraction) x the run's last
    env_step); then per (env, variant) the median, min and max of those run means. Descriptive.

    Failed and diverged runs are left out (they stopped early: their last steps are not the end of
    training); non-finite values are left out of a run's mean.
    diagnostics: `RunRecords.diagnostics` rows. runs: rows with env, variant, seed, state.
    Columns: env, variant, n_runs, then `<column>_median`, `<column>_min`, `<column>_max` per column.
    """
    keys = ["env", "variant", "seed"]
    stat_columns = [f"{c}_{s}" for c in columns for s in ("median", "min", "max")]
    values = diagnostics.merge(complete_runs(runs)[keys], on=keys, how="inner")[[*keys, "env_step", *columns]].copy()
    if values.empty:
        return pd.DataFrame(columns=["env", "variant", "n_runs", *stat_columns])
    values[list(columns)] = values[list(columns)].astype("float64").replace([np.inf, -np.inf], np.nan)
    last = values.groupby(keys)["env_step"].transform("max")
    per_run = values[values["env_step"] > (1.0 - fraction) * last].groupby(keys)[list(columns)].mean().reset_index()
    grouped = per_run.groupby(["env", "variant"])
    table = grouped[list(columns)].agg(["median", "min", "max"])
    table.columns = [f"{c}_{s}" for c, s in table.columns]
    table.insert(0, "n_runs", grouped["seed"].nunique())
    table = sort_runs(table.reset_index().assign(seed=0))  # catalog order of envs and variants
    return table[["env", "variant", "n_runs", *stat_columns]].reset_index(drop=True)


def mean_diagnostics(diagnostics: pd.DataFrame, columns: Sequence[str] = PLOTTED_DIAGNOSTICS) -> pd.DataFrame:
    """Mean across seeds of each diagnostic per (env, variant, env_step), over runs of every state.

    Diverged and failed runs are kept (their diagnostics show how they ended); non-finite values are
    left out of the means. Columns: env, variant, env_step, n_runs, then `columns`.
    """
    keys = ["env", "variant", "env_step"]
    if diagnostics.empty:
        return pd.DataFrame(columns=[*keys, "n_runs", *columns])
    values = diagnostics[[*keys, "seed", *columns]].copy()
    values[list(columns)] = values[list(columns)].astype("float64").replace([np.inf, -np.inf], np.nan)
    grouped = values.groupby(keys, sort=True)
    means = grouped[list(columns)].mean()
    means.insert(0, "n_runs", grouped["seed"].nunique())
    return means.reset_index()
