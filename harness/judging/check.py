"""`python -m harness check`: a learning-curve regression check against a committed baseline.

The rule (also in the README): for every checked variant and for each of final_return and auc_return,
the new runs' IQM of normalized score must not fall below the baseline's 95% bootstrap interval (of the
IQM over its seeds) by more than `tolerance` (default 0.15 of the way from a random policy to the
target return; the README gives the false-alarm measurement behind it). A run that fails or diverges
where the baseline's run of the same seed completed is a regression too; other runs that fail or diverge
count at their failure score (`stats.score_failures`), so any number of seeds can be checked.
Fixed-seed CPU runs are reproducible on one platform, so the check also says whether the curves are
identical to the baseline's: identical is the strongest pass; a difference on the same platform
fingerprint is printed as a warning (the learner's arithmetic changed), never a failure by itself.

The comparison reads only run records (results/README.md): the baseline is a results folder plus
`baseline.json` (provenance).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import platform
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import machine, records

if TYPE_CHECKING:  # loaded only when a comparison is made (pandas and rliable)
    from . import stats

DEFAULT_BASELINE = Path("results/baselines/ci")
DEFAULT_VARIANTS = ("reference", "blog-sac2")
DEFAULT_SEEDS = 3
# Reseeded checks of unchanged code failed 4.2% of the time at 0.10 and 0.5% at 0.15; runs that did not
# learn (learning rates / 3) failed at every tolerance up to 0.25 (README, "False alarms").
DEFAULT_TOLERANCE = 0.15
CHECK_ENV = "Pendulum-v1"
METRICS = ("final_return", "auc_return")


@dataclass(frozen=True)
class MetricCheck:
    """One (variant, metric) comparison, in normalized score units."""

    variant: str
    metric: str
    baseline: stats.Interval  # IQM of the baseline seeds and its 95% bootstrap interval
    new: float  # IQM of the new seeds (nan when none completed)
    threshold: float  # baseline.low - tolerance
    new_states: str
    baseline_states: str
    baseline_complete: frozenset = frozenset()  # seeds whose baseline run completed
    lost_seeds: tuple = ()  # of those, the seeds whose new run failed or diverged

    @property
    def regression(self) -> bool:
        if self.lost_seeds:
            return True  # a seed that completed in the baseline now fails or diverges
        if np.isnan(self.baseline.estimate):
            return False  # no completed baseline run: nothing learned to regress from
        return not (self.new >= self.threshold)


@dataclass(frozen=True)
class CheckOutcome:
    checks: list[MetricCheck]
    identical: bool | None  # None: not comparable (other seeds, or missing runs)
    same_platform: bool
    warnings: list[str]

    @property
    def passed(self) -> bool:
        return not any(c.regression for c in self.checks)


def platform_fingerprint() -> dict[str, str]:
    """What decides whether fixed-seed CPU results can be bit-identical: library versions and CPU."""
    versions = machine.package_versions()
    model, flags = machine.cpu_info()
    flags_text = str(sorted(flags)) if flags else "unknown"
    import zlib

    return {
        "torch": versions["torch"],
        "numpy": versions["numpy"],
        "python": versions["python"],
        "machine": platform.machine(),
        "cpu": model,
        "cpu_flags_crc32": f"{zlib.crc32(flags_text.encode()):08x}",
    }


def _states(runs) -> str:
    counts = runs["state"].value_counts()
    return ", ".join(f"{counts[s]} {s}" for s in sorted(counts.index))


def _baseline_checks(
    base_runs, variants: Sequence[str], tolerance: float, reps: int, baseline_dir: Path
) -> list[MetricCheck]:
    """Per (variant, metric), the baseline side of a check (interval, threshold, states); new is nan."""
    from . import stats  # pandas and rliable: loaded only when a comparison is made
    from .normalization import normalized_score

    checks = []
    for variant in variants:
        base = base_runs[(base_runs.variant == variant) & (base_runs.env == CHECK_ENV)]
        if base.empty:
            raise ValueError(
                f"baseline {baseline_dir} has no {CHECK_ENV} runs of {variant}; make one with --update-baseline"
            )
        for metric in METRICS:
            base_scores = normalized_score(stats.complete_runs(base)[metric].to_numpy(float), CHECK_ENV)
            if base_scores.size == 0:
                interval = stats.Interval(float("nan"), float("nan"), float("nan"))
            else:
                seed = stats.stable_seed("check", variant, metric)
                interval = stats.aggregate_intervals(base_scores[:, None], gamma=None, reps=reps, seed=seed)["iqm"]
            complete = frozenset(int(x) for x in stats.complete_runs(base)["seed"])
            checks.append(
                MetricCheck(
                    variant, metric, interval, float("nan"), interval.low - tolerance, "", _states(base), complete
                )
            )
    return checks


def _with_new_runs(check: MetricCheck, new) -> MetricCheck:
    """`check` completed with the IQM and run states of `new`, that variant's new runs (non-empty, with
    failed and diverged runs scored by `stats.score_failures`, so that they pull the IQM down)."""
    from . import stats
    from .normalization import normalized_score

    scores = normalized_score(stats.counted_runs(new)[check.metric].to_numpy(float), CHECK_ENV)
    iqm = float(stats.interquartile_mean(scores)) if scores.size else float("nan")
    lost = tuple(
        sorted(
            int(r.seed)
            for r in new.itertuples(index=False)
            if r.state != "complete" and int(r.seed) in check.baseline_complete
        )
    )
    return dataclasses.replace(check, new=iqm, new_states=_states(new), lost_seeds=lost)


def _budgets(
    configs: Mapping[tuple[str, str, int], dict],
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> set[tuple]:
    """The distinct budgets (`loading.run_budget`, as sorted (key, value) pairs) of the check env's runs in
    `configs` (`loading.RunRecords.configs`): of `variants` and `seeds` where given."""
    from . import loading

    return {
        tuple(sorted(loading.run_budget(config).items()))
        for (env, variant, seed), config in configs.items()
        if env == CHECK_ENV and (variants is None or variant in variants) and (seeds is None or seed in seeds)
    }


def _require_same_budget(
    base_configs, new_configs, new_dir: Path, variants: Sequence[str], seeds: Sequence[int] | None = None
) -> None:
    """Raise ValueError when runs of `new_dir` were trained on another budget than the baseline's: a
    curve of 20k steps against one of 5k would pass or fail on its length, not on what changed."""
    base, new = _budgets(base_configs), _budgets(new_configs, variants, seeds)
    if base and new - base:

        def shown(budgets):
            return " or ".join(", ".join(f"{k} {v}" for k, v in b) for b in sorted(budgets))

        raise ValueError(
            f"{new_dir}'s runs were trained on another budget ({shown(new - base)}) than the "
            f"baseline's ({shown(base)}); compare runs of the baseline's budget"
        )


def compare(
    baseline_dir: Path,
    new_dir: Path,
    variants: Sequence[str],
    tolerance: float = DEFAULT_TOLERANCE,
    reps: int = 2000,
    seeds: Sequence[int] | None = None,
) -> CheckOutcome:
    """Compare the runs of `variants` on the check env in `new_dir` against `baseline_dir`.

    seeds: which of `new_dir`'s seeds to compare (default: all of them).
    Raises ValueError (a usage error) when the baseline has no runs of a variant.
    """
    from . import loading, stats

    base_records, new_records = loading.scan_results(baseline_dir), loading.scan_results(new_dir)
    _require_same_budget(base_records.configs, new_records.configs, new_dir, variants, seeds)
    warnings = [*base_records.skipped(), *new_records.skipped()]
    checks: list[MetricCheck] = []
    scored = stats.scored_runs(new_records)
    for check in _baseline_checks(base_records.runs, variants, tolerance, reps, baseline_dir):
        runs = scored
        new = runs[(runs.variant == check.variant) & (runs.env == CHECK_ENV)]
        if seeds is not None:
            new = new[new.seed.isin(list(seeds))]
        if new.empty:
            raise ValueError(f"{new_dir} has no {CHECK_ENV} runs of {check.variant}")
        checks.append(_with_new_runs(check, new))
    identical = _identical_curves(baseline_dir, new_dir, variants, seeds)
    base_platform = _read_baseline_meta(baseline_dir).get("platform")
    return CheckOutcome(checks, identical, base_platform == platform_fingerprint(), warnings)


@dataclass(frozen=True)
class FalseAlarmStudy:
    """Reseeded checks of runs trained by unchanged code against the baseline: every failure is a false alarm.

    seed_sets[i] is the i-th disjoint set of `per_check` seeds (in seed order, none of the baseline's)
    and checks[i] its (variant, metric) comparisons. `subsets` counts every `per_check`-seed subset of
    the same seeds (overlapping, so not independent: a finer estimate of the rate, without an interval).
    """

    per_check: int
    seed_sets: list[tuple[int, ...]]
    checks: list[list[MetricCheck]]
    subsets: int
    subset_failures: int

    @property
    def false_alarms(self) -> int:
        return sum(any(c.regression for c in checks) for checks in self.checks)

    def rate_upper_bound(self, confidence: float = 0.95) -> float:
        """Exact (Clopper-Pearson) upper bound on the false-alarm rate from the disjoint checks."""
        from scipy.stats import binomtest

        return float(binomtest(self.false_alarms, len(self.seed_sets)).proportion_ci(confidence).high)


MAX_SUBSETS = 20_000


def false_alarm_study(
    baseline_dir: Path,
    results_dir: Path,
    variants: Sequence[str],
    per_check: int = DEFAULT_SEEDS,
    tolerance: float = DEFAULT_TOLERANCE,
    reps: int = 2000,
) -> FalseAlarmStudy:
    """Run the check's rule on many reseeded seed sets of `results_dir` (runs of unchanged code).

    Uses the seeds that every variant has in `results_dir` and the baseline does not. The baseline's
    intervals are computed once; each seed set then gets exactly `MetricCheck.regression`. At most
    MAX_SUBSETS subsets are evaluated (a seeded random sample beyond that).
    Raises ValueError when there are fewer than `per_check` such seeds.
    """
    from . import loading, stats

    base_records, new_records = loading.scan_results(baseline_dir), loading.scan_results(results_dir)
    _require_same_budget(base_records.configs, new_records.configs, results_dir, variants)
    base_runs = base_records.runs
    baseline_checks = _baseline_checks(base_runs, variants, tolerance, reps, baseline_dir)
    runs = stats.scored_runs(new_records)
    runs = runs[runs.env == CHECK_ENV]
    per_variant = {v: runs[runs.variant == v].set_index("seed") for v in variants}
    seeds = sorted(set.intersection(*(set(r.index) for r in per_variant.values())) - set(base_runs["seed"]))
    if len(seeds) < per_check:
        raise ValueError(
            f"{results_dir} has {len(seeds)} seeds of every variant outside the baseline's; "
            f"a reseeded check needs {per_check}"
        )

    def checks_for(seed_set: Sequence[int]) -> list[MetricCheck]:
        return [_with_new_runs(c, per_variant[c.variant].loc[list(seed_set)]) for c in baseline_checks]

    seed_sets = [tuple(seeds[i : i + per_check]) for i in range(0, len(seeds) - per_check + 1, per_check)]
    if math.comb(len(seeds), per_check) <= MAX_SUBSETS:
        subsets = list(itertools.combinations(seeds, per_check))
    else:
        rng = np.random.default_rng(0)
        subsets = [tuple(rng.choice(seeds, per_check, replace=False)) for _ in range(MAX_SUBSETS)]
    failures = sum(any(c.regression for c in checks_for(subset)) for subset in subsets)
    return FalseAlarmStudy(per_check, seed_sets, [checks_for(s) for s in seed_sets], len(subsets), failures)


def format_false_alarm_study(study: FalseAlarmStudy) -> list[str]:
    lines = [f"{'seeds':18s} {'result':10s} closest to failing (new IQM - fail-below threshold)"]
    for seed_set, checks in zip(study.seed_sets, study.checks):
        closest = min(checks, key=lambda c: c.new - c.threshold if np.isfinite(c.new) else -np.inf)
        result = "FAIL" if any(c.regression for c in checks) else "pass"
        lines.append(
            f"{','.join(map(str, seed_set)):18s} {result:10s} "
            f"{closest.variant} {closest.metric} {closest.new - closest.threshold:+.3f}"
        )
    n = len(study.seed_sets)
    lines.append(
        f"false alarms: {study.false_alarms} of {n} disjoint reseeded checks of {study.per_check} seeds "
        f"(95% upper bound on the rate: {study.rate_upper_bound():.0%})"
    )
    lines.append(
        f"all {study.subsets} {study.per_check}-seed subsets of the same seeds: {study.subset_failures} fail "
        f"({study.subset_failures / study.subsets:.1%})"
    )
    return lines


def _identical_curves(
    baseline_dir: Path, new_dir: Path, variants: Sequence[str], seeds: Sequence[int] | None
) -> bool | None:
    pairs = []
    for variant in variants:
        new_runs = sorted(Path(new_dir).glob(f"runs/{CHECK_ENV}/{variant}/seed_*/eval.csv"))
        for path in new_runs:
            if seeds is not None and int(path.parent.name.removeprefix("seed_")) not in seeds:
                continue
            twin = Path(baseline_dir) / path.relative_to(new_dir)
            if not twin.exists():
                return None
            pairs.append((path, twin))
    if not pairs:
        return None
    return all(a.read_bytes() == b.read_bytes() for a, b in pairs)


def _read_baseline_meta(baseline_dir: Path) -> dict:
    try:
        return json.loads((Path(baseline_dir) / "baseline.json").read_text())
    except (OSError, ValueError):
        return {}


def format_outcome(outcome: CheckOutcome, tolerance: float, overridden: bool = False) -> list[str]:
    """The check's report: one table row per (variant, metric), then the verdict lines.

    `overridden`: the variants' specs were changed with --set, so curves that differ from the
    baseline's are expected and say nothing about the learner's arithmetic.
    """
    lines = [
        f"{'variant':14s} {'metric':13s} {'baseline IQM [95% CI]':>28s} {'fail below':>10s} {'new IQM':>8s}  result",
    ]
    for c in outcome.checks:
        base = f"{c.baseline.estimate:.3f} [{c.baseline.low:.3f}, {c.baseline.high:.3f}]"
        result = "REGRESSION" if c.regression else "ok"
        if c.lost_seeds:
            result += f" (seed(s) {', '.join(map(str, c.lost_seeds))} completed in the baseline, now did not)"
        if any(state in c.new_states for state in ("failed", "diverged")):
            result += f" (runs: {c.new_states}; baseline: {c.baseline_states})"
        lines.append(f"{c.variant:14s} {c.metric:13s} {base:>28s} {c.threshold:10.3f} {c.new:8.3f}  {result}")
    lines.append(f"(normalized scores: 0 = uniform random policy, 1 = target return; tolerance {tolerance})")
    if outcome.identical is True:
        lines.append("curves: identical to the baseline, bit for bit")
    elif outcome.identical is False and overridden:
        lines.append("curves: differ from the baseline, as expected: the specs were overridden with --set")
    elif outcome.identical is False and outcome.same_platform:
        lines.append(
            "warning: curves differ from the baseline on the same platform fingerprint: the learner's "
            "arithmetic changed (rerun with --update-baseline if that was intended)"
        )
    elif outcome.identical is False:
        lines.append("curves: differ from the baseline (another platform: bit-identity is not expected)")
    else:
        lines.append("curves: not compared bit for bit (other seeds or runs than the baseline's)")
    lines.extend(f"warning: {w}" for w in outcome.warnings)
    lines.append("check: " + ("PASS" if outcome.passed else "FAIL: learning regressed"))
    return lines


def unfinished_runs(new_dir: Path, variants: Sequence[str]) -> str:
    """'' when every run of `variants` in `new_dir` completed (and each has at least one); else one line
    naming the runs that did not (state or why unreadable), for refusing them as a baseline."""
    bad = []
    for variant in variants:
        folders = sorted((Path(new_dir) / "runs" / CHECK_ENV / variant).glob("seed_*"))
        if not folders:
            bad.append(f"{variant}: no runs")
        for folder in folders:
            try:
                state = records.read_json(folder / "status.json").get("state")
            except (OSError, ValueError, AttributeError):
                state = "unreadable status.json"
            if state != "complete":
                bad.append(f"{variant} {folder.name}: {state or 'unfinished'}")
    return ", ".join(bad)


def write_baseline(new_dir: Path, baseline_dir: Path, variants: Sequence[str], meta: dict) -> None:
    """Replace `baseline_dir` with the run folders of `new_dir` and a baseline.json of provenance."""
    baseline_dir = Path(baseline_dir)
    staging = baseline_dir.with_name(baseline_dir.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    for variant in variants:
        src = Path(new_dir) / "runs" / CHECK_ENV / variant
        shutil.copytree(src, staging / "runs" / CHECK_ENV / variant)
    records.write_json(
        staging / "baseline.json",
        {
            **meta,
            "git_commit": machine.git_commit(),
            "versions": machine.package_versions(),
            "platform": platform_fingerprint(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    old = baseline_dir.with_name(baseline_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if baseline_dir.exists():
        baseline_dir.rename(old)
    staging.rename(baseline_dir)
    shutil.rmtree(old, ignore_errors=True)
