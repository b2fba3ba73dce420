"""The verdict rule measured on real runs: its error rate on null reports, its power on a real effect.

Null study. Two results folders hold one variant trained on the same seeds twice, the second time with
independent training randomness (`--set salt=1`): the environment and evaluation resets are common, as
they are between two variants of a real report, so every difference between the two is noise with the
real pairing structure. A null report is shaped like a real one: `compared` variants against a
reference, `seeds` seeds each. Null variant k holds the salt-1 runs of its own random `seeds` seeds,
and the reference the salt-0 runs of every seed any variant drew, so each comparison is paired as in a
real report. Drawing each variant's seeds independently makes its comparisons less dependent than a
real report's (which share the reference's runs), the harder case for a family-wise rate. The verdicts
come from `stats.verdict_table`, the report's own code.

Power study. One folder of the reference, one of a variant with a real effect (for example every
learning rate x 0.3), on common seeds: draws of n seeds give the rate at which the rule detects the
effect, paired (the same n seeds on both sides) and unpaired (n other seeds of the reference), at the
per-comparison level of a family of a given size, and the median of the minimum detectable difference
the report would print for those draws. With `shift`, the second folder's normalized scores are moved by
one constant so that their mean difference from the reference over the common seeds is exactly `shift`:
on the two salts of a null study this puts a difference of known size into real noise with the real
pairing structure, which measures whether the printed minimum detectable difference is detected as
often as it claims (80%). Draws of n seeds out of a pool of N vary less than independent seeds would
(by the finite-population factor (N - n) / (N - 1) in variance), so with a small pool the measured rate
is an overestimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .. import records
from . import inference, loading, normalization, stats


class CalibrationError(ValueError):
    """The folders cannot support the requested study (a usage error)."""


def _scored_runs(results_dir: Path, variant: str, env: str) -> tuple[pd.DataFrame, list[dict]]:
    """The scored runs (`stats.score_failures`) of `variant` on `env` in `results_dir`, indexed by seed,
    and what each was trained with (`_setup`)."""
    records = loading.scan_results(results_dir)
    runs = stats.scored_runs(records)
    runs = runs[(runs["variant"] == variant) & (runs["env"] == env)]
    setups = [_setup(config) for (e, v, _), config in records.configs.items() if (e, v) == (env, variant)]
    return stats.counted_runs(runs).set_index("seed", drop=False), setups


def _setup(config: dict) -> dict:
    """A run's spec (read back through `VariantSpec`, so a field added since takes its default) and
    budget (its profile's name left out), as one flat dict: what the two folders of a study must share."""
    spec = records.recorded_spec(config)
    return {**spec, **{f"budget.{k}": v for k, v in loading.run_budget(config).items()}}


def _differences(a: Sequence[dict], b: Sequence[dict], ignore: Sequence[str] = ()) -> list[str]:
    """'field A vs B' for each field (not in `ignore`) whose values differ between the runs of two
    folders, or between the runs of the first folder."""
    lines = []
    for key in sorted({k for setup in [*a, *b] for k in setup} - set(ignore)):
        in_a, in_b = ({repr(setup.get(key)) for setup in setups} for setups in (a, b))
        if in_a != in_b or len(in_a) > 1:
            lines.append(f"{key} {'/'.join(sorted(in_a))} vs {'/'.join(sorted(in_b))}")
    return lines


@dataclass(frozen=True)
class NullStudy:
    """Spurious verdicts over `reports` null reports of `compared` comparisons of `seeds` seeds each.

    spurious_reports[metric]: reports with any better/worse in that metric's family; 'either' counts
    reports with one in either family. spurious_comparisons[metric]: comparisons called better/worse.
    """

    reports: int
    compared: int
    seeds: int
    pool: int  # seeds available in both folders
    spurious_reports: dict[str, int]
    spurious_comparisons: dict[str, int]

    def family_rate(self, metric: str) -> float:
        return self.spurious_reports[metric] / self.reports

    def family_upper(self, metric: str) -> float:
        return inference.clopper_pearson_upper(self.spurious_reports[metric], self.reports)

    def comparison_rate(self, metric: str) -> float:
        return self.spurious_comparisons[metric] / (self.reports * self.compared)


def null_study(
    salt0_dir: Path,
    salt1_dir: Path,
    variant: str = "reference",
    env: str = "Pendulum-v1",
    reports: int = 500,
    compared: int = 8,
    seeds: int = 5,
    rng_seed: int = 0,
) -> NullStudy:
    """Run `reports` null reports (see the module doc) through the report's verdict rule."""
    (a, a_setups), (b, b_setups) = _scored_runs(salt0_dir, variant, env), _scored_runs(salt1_dir, variant, env)
    differ = _differences(a_setups, b_setups, ignore=("salt",))
    if differ:
        raise CalibrationError(
            f"{salt0_dir} and {salt1_dir} differ in more than the salt of {variant}: "
            f"{'; '.join(differ)} (a null study needs one spec and budget, trained again "
            "with another --set salt)"
        )
    pool = sorted(set(a.index) & set(b.index))
    if len(pool) < seeds:
        raise CalibrationError(
            f"{salt0_dir} and {salt1_dir} share {len(pool)} seeds of {variant} on {env}; a null report needs {seeds}"
        )
    if {s.get("salt") for s in a_setups} & {s.get("salt") for s in b_setups}:
        raise CalibrationError(
            f"{salt0_dir} and {salt1_dir} hold runs of the same salt: the same seeds would be "
            "the same runs (train the second with --set salt=1)"
        )
    rng = np.random.default_rng(rng_seed)
    metrics = list(stats.RETURN_METRICS)
    spurious_reports = {m: 0 for m in [*metrics, "either"]}
    spurious_comparisons = {m: 0 for m in metrics}
    for _ in range(reports):
        draws = [sorted(rng.choice(pool, seeds, replace=False).tolist()) for _ in range(compared)]
        used = sorted({s for d in draws for s in d})
        parts = [a.loc[used].assign(variant="reference")]
        parts += [b.loc[d].assign(variant=f"null-{k}") for k, d in enumerate(draws)]
        frame = pd.concat(parts, ignore_index=True)
        any_metric = False
        for metric in metrics:
            table = stats.verdict_table(frame, "reference", metric=metric, effect_sizes=False)
            table = table[table["env"] == env]
            called = int(table["verdict"].isin([stats.BETTER, stats.WORSE]).sum())
            spurious_comparisons[metric] += called
            spurious_reports[metric] += called > 0
            any_metric |= called > 0
        spurious_reports["either"] += any_metric
    return NullStudy(reports, compared, seeds, len(pool), spurious_reports, spurious_comparisons)


def format_null_study(study: NullStudy, salt0_dir: Path, salt1_dir: Path) -> list[str]:
    lines = [
        f"null study: {study.reports} null reports of {study.compared} comparisons x {study.seeds} seeds, drawn from "
        f"{study.pool} seeds of {salt0_dir} (reference) and {salt1_dir} (null variants)",
        f"{'family':14s} {'reports with a spurious verdict':>32s} {'95% upper':>10s} {'per comparison':>15s}",
    ]
    for metric in [*stats.RETURN_METRICS, "either"]:
        per = f"{study.comparison_rate(metric):.2%}" if metric != "either" else ""
        lines.append(
            f"{metric:14s} {study.spurious_reports[metric]:>10d} of {study.reports:<6d} ({study.family_rate(metric):6.2%}) "
            f"{study.family_upper(metric):>10.2%} {per:>15s}"
        )
    lines.append(
        f"(the reports resample {study.pool} seed pairs: the upper bound, exact for independent reports, is "
        f"optimistic when the pool is small against {study.compared} x {study.seeds} seeds a report)"
    )
    return lines


@dataclass(frozen=True)
class PowerRow:
    n: int
    paired: bool
    family: int
    draws: int
    detected: int  # draws whose interval excludes 0 on the side of the true effect
    wrong_sign: int  # draws called significant in the opposite direction
    mean_difference: float  # over the draws, normalized
    median_mdd: float  # median over the draws of the minimum detectable difference at this level


def power_study(
    reference_dir: Path,
    effect_dir: Path,
    variant: str = "reference",
    env: str = "Pendulum-v1",
    ns: Sequence[int] = (5, 10),
    families: Sequence[int] = (1, 8),
    draws: int = 500,
    rng_seed: int = 0,
    metric: str = "final_return",
    shift: float | None = None,
) -> list[PowerRow]:
    """Detection rates of the effect in `effect_dir` against `reference_dir` (see the module doc); with
    `shift` (normalized score) the effect is replaced by exactly that mean difference."""
    if not normalization.can_normalize(env):
        raise CalibrationError(f"{env} has no normalization constants: the study works in normalized score")
    (ref, ref_setups), (eff, eff_setups) = (
        _scored_runs(reference_dir, variant, env),
        _scored_runs(effect_dir, variant, env),
    )
    spec_fields = {k for setup in [*ref_setups, *eff_setups] for k in setup if not k.startswith("budget.")}
    differ = _differences(ref_setups, eff_setups, ignore=sorted(spec_fields))  # the spec's change is the effect
    if differ:
        raise CalibrationError(
            f"{reference_dir} and {effect_dir} hold {variant} runs of different budgets: {'; '.join(differ)}"
        )
    score = lambda frame, seeds: normalization.normalized_score(  # noqa: E731
        frame.loc[list(seeds), metric].to_numpy(float), env
    )
    common = sorted(set(ref.index) & set(eff.index))
    offset = 0.0
    if shift is not None:
        if not common:
            raise CalibrationError(f"{reference_dir} and {effect_dir} share no seed of {variant} on {env} to shift")
        offset = shift - float(np.mean(score(eff, common) - score(ref, common)))
    shifted = lambda seeds: score(eff, seeds) + offset  # noqa: E731
    true_sign = np.sign(shifted(common).mean() - score(ref, common).mean()) if common else 0.0
    rng = np.random.default_rng(rng_seed)
    rows = []
    for n in ns:
        for paired in (True, False):
            if len(common) < n or (not paired and len(ref.index) < 2 * n):
                continue
            tests = []
            for _ in range(draws):
                chosen = rng.choice(common, n, replace=False)
                if paired:
                    tests.append(inference.paired_test(shifted(chosen), score(ref, chosen)))
                else:
                    others = sorted(set(ref.index) - set(chosen.tolist()))
                    if len(others) < n:
                        break
                    tests.append(
                        inference.welch_test(shifted(chosen), score(ref, rng.choice(others, n, replace=False)))
                    )
            if not tests:
                continue
            for family in families:
                level = inference.family_level(family)
                intervals = [t.interval(level) for t in tests]
                called = [np.sign(lo) if lo > 0 or hi < 0 else 0.0 for lo, hi in intervals]
                detected = sum(c == true_sign != 0 for c in called)
                wrong = sum(c == -true_sign != 0 for c in called)
                mdd = float(np.median([inference.minimum_detectable_difference(t.se, t.df, level) for t in tests]))
                rows.append(
                    PowerRow(
                        n,
                        paired,
                        family,
                        len(tests),
                        int(detected),
                        int(wrong),
                        float(np.mean([t.difference for t in tests])),
                        mdd,
                    )
                )
    return rows


def format_power_study(
    rows: Sequence[PowerRow],
    reference_dir: Path,
    effect_dir: Path,
    metric: str = "final_return",
    shift: float | None = None,
) -> list[str]:
    added = "" if shift is None else f", {effect_dir} moved to a mean difference of exactly {shift:+g}"
    lines = [
        f"power study: {effect_dir} against {reference_dir} (normalized {metric}{added})",
        f"{'seeds':>5s} {'design':8s} {'family':>6s} {'detected':>18s} {'wrong sign':>10s} {'mean diff':>10s} "
        f"{'median MDD':>10s}",
    ]
    for r in rows:
        lines.append(
            f"{r.n:>5d} {'paired' if r.paired else 'unpaired':8s} {r.family:>6d} "
            f"{r.detected:>7d} of {r.draws:<4d} ({r.detected / r.draws:5.1%}) {r.wrong_sign:>10d} {r.mean_difference:>+10.3f} "
            f"{r.median_mdd:>10.3f}"
        )
    if not rows:
        lines.append("(too few seeds for any design)")
    return lines
