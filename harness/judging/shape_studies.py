"""The verdict rules measured on returns of the study's own shapes: null reports, replays, synthetic shifts.

A *shape* is one results folder's reference runs on one environment: each run a pair (normalized
final_return, normalized auc_return) scored as the report scores it (`stats.scored_runs`). A synthetic
run is a whole run drawn with replacement from that pool, so its two scores stay together and the
pool's shape (LunarLander's and BipedalWalker's runs break through or hover: bimodal) is kept.

Null study. A null report has `compared` null variants and a reference, every run drawn from the pool:
nothing differs, so any better or worse is spurious (equivalent is right). Fixed designs judge n seeds
with the report's rule (`inference.decide` over `stats.family_correlation`, many-to-one max-t, and
Bonferroni beside it); sequential designs judge looks of `look_every` seeds up to `max_seeds` with a
rule of `sequential.RULES`. A report is spurious in a metric if any comparison is called better or
worse (at any look). Draws pair the seeds of a variant and the reference but draw them independently,
so a paired difference has twice a run's variance (real pairing shares the resets, and is tighter).

Shift study. The same draws with `shift` added to one variant's scores: how often each design calls it
better (and worse: the wrong sign), and the seeds the sequential designs spend until they decide it.

Replay. A committed campaign fed to a sequential rule seed by seed, as a grid would have run it: the look
at which each comparison is decided and the variant runs spent, beside the fixed rule on all its seeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import inference, loading, normalization, sequential, stats

METRICS = stats.RETURN_METRICS
FIXED_METHODS = (inference.MANY_TO_ONE, inference.BONFERRONI)
STUDY_DRAWS = 20_000  # max-t draws per null report (the report uses 200,000): alpha to about +-0.0015
STUDY_BOUNDARY_DRAWS = 100_000  # a sequential design's boundary draws in a study: those of a grid


class StudyError(ValueError):
    """A folder cannot support the requested study (a usage error)."""


def campaign_scores(results_dir: Path, env: str) -> dict[str, dict[str, dict[int, float]]]:
    """`{metric: {variant: {seed: normalized score}}}` of one environment's scored runs in a folder."""
    if not normalization.can_normalize(env):
        raise StudyError(f"{env} has no normalization constants: the studies work in normalized score")
    runs = stats.counted_runs(stats.scored_runs(loading.scan_results(results_dir)))
    runs = runs[runs["env"] == env]
    if runs.empty:
        raise StudyError(f"{results_dir} holds no scored run of {env}")
    out: dict[str, dict[str, dict[int, float]]] = {}
    for metric in METRICS:
        values = normalization.normalized_score(runs[metric].to_numpy(float), env)
        table: dict[str, dict[int, float]] = {}
        for variant, seed, value in zip(runs["variant"], runs["seed"].astype(int), values):
            table.setdefault(str(variant), {})[int(seed)] = float(value)
        out[metric] = table
    return out


def reference_pool(results_dir: Path, env: str, reference: str = stats.REFERENCE_NAME) -> np.ndarray:
    """The shape: `(P, 2)` normalized (final_return, auc_return) of the reference's P runs, by seed."""
    scores = campaign_scores(results_dir, env)
    if reference not in scores[METRICS[0]]:
        raise StudyError(f"{results_dir} holds no {reference} run of {env}")
    seeds = sorted(scores[METRICS[0]][reference])
    if len(seeds) < 3:
        raise StudyError(f"{results_dir} holds {len(seeds)} {reference} runs of {env}; a shape needs at least 3")
    return np.array([[scores[m][reference][s] for m in METRICS] for s in seeds])


def draw_reports(pool: np.ndarray, reports: int, compared: int, seeds: int, rng_seed: int) -> np.ndarray:
    """Null reports `(reports, compared + 1, seeds, 2)`: row 0 the reference, whole runs drawn from `pool`."""
    rng = np.random.default_rng(rng_seed)
    return pool[rng.integers(0, pool.shape[0], size=(reports, compared + 1, seeds))]


def fixed_calls(scores: np.ndarray, method: str, margin: float | None = inference.EQUIVALENCE_MARGIN) -> list[str]:
    """The report's verdicts on one metric of one synthetic report: `scores` `(compared + 1, n)`, row 0 the
    reference, seeds aligned by column."""
    reference = dict(enumerate(scores[0]))
    cells = []
    for row in scores[1:]:
        x = dict(enumerate(row))
        cells.append({"env": "shape", "x": x, "y": reference, "test": inference.paired_test(row, scores[0])})
    correlation = stats.family_correlation(cells) if method == inference.MANY_TO_ONE else None
    tests = [c["test"] for c in cells]
    return [
        d.verdict
        for d in inference.decide(tests, margin=margin, with_mdd=False, correlation=correlation, draws=STUDY_DRAWS)
    ]


def sequential_looks(
    scores: np.ndarray, design: sequential.SequentialDesign, shift_row: int | None = None
) -> list[sequential.Look]:
    """The looks of `design` on one metric of one synthetic report `(compared + 1, max_seeds)` (row 0 the
    reference; variant k is row k), until every comparison is decided or the last look (a replaying
    rule: its last look alone, which holds every decision and the seeds it was reached at)."""
    table = {"reference": dict(enumerate(scores[0].tolist()))}
    table |= {f"v{k}": dict(enumerate(scores[k].tolist())) for k in range(1, scores.shape[0])}
    return sequential.judge_looks(table, "reference", design)


def crude_calls(scores: np.ndarray, looks: Sequence[int], alpha: float = inference.ALPHA) -> list[tuple[str, int]]:
    """The crude sequential rule the sequential rules are measured against: at each of `looks` (seed
    counts) a paired t interval per open comparison at level 1 - alpha / (m len(looks)) (Bonferroni over
    the m comparisons and the looks), read as better / worse / equivalent within the margin like the
    report's; a decided comparison stops. `scores` `(m + 1, max(looks))`, row 0 the reference.
    Returns (verdict, seeds) per comparison: the look's seeds where decided, else the last look's."""
    m = scores.shape[0] - 1
    level = 1 - alpha / (m * len(looks))
    out: list[tuple[str, int] | None] = [None] * m
    for n in looks:
        for k in range(m):
            if out[k] is not None:
                continue
            low, high = inference.paired_test(scores[k + 1, :n], scores[0, :n]).interval(level)
            verdict = sequential.interval_verdict(low, high, inference.EQUIVALENCE_MARGIN)
            if verdict != sequential.OPEN:
                out[k] = (verdict, n)
    return [c if c is not None else (sequential.OPEN, looks[-1]) for c in out]


def crude_name(looks: Sequence[int], compared: int) -> str:
    return f"crude: paired t at {', '.join(map(str, looks))} seeds, Bonferroni over {compared} x {len(looks)}"


@dataclass(frozen=True)
class NullRow:
    """Spurious verdicts of one design on one shape: `spurious[metric]` reports of `reports` with any."""

    shape: str
    design: str
    reports: int
    spurious: dict[str, int]
    mean_seeds: float  # sequential: mean seeds a comparison used (fixed: its n)

    def rate(self, metric: str) -> float:
        return self.spurious[metric] / self.reports

    def upper(self, metric: str) -> float:
        return inference.clopper_pearson_upper(self.spurious[metric], self.reports)


def null_fixed(
    pool: np.ndarray, shape: str, seeds: int, method: str, reports: int, compared: int, rng_seed: int
) -> NullRow:
    """`reports` fixed-design null reports of `seeds` seeds through the report's rule by `method`."""
    draws = draw_reports(pool, reports, compared, seeds, rng_seed)
    spurious = {m: 0 for m in METRICS}
    for report in draws:
        for k, metric in enumerate(METRICS):
            calls = fixed_calls(report[:, :, k], method)
            spurious[metric] += any(c in (inference.BETTER, inference.WORSE) for c in calls)
    return NullRow(shape, f"fixed {seeds} seeds, {method}", reports, spurious, float(seeds))


def null_sequential(
    pool: np.ndarray, shape: str, design: sequential.SequentialDesign, reports: int, compared: int, rng_seed: int
) -> NullRow:
    """`reports` sequential null reports of `design`: spurious if any better/worse at any look."""
    draws = draw_reports(pool, reports, compared, design.max_seeds, rng_seed)
    spurious = {m: 0 for m in METRICS}
    seeds_used = []
    for report in draws:
        for k, metric in enumerate(METRICS):
            final = sequential_looks(report[:, :, k], design)[-1]
            spurious[metric] += any(
                d.verdict in (sequential.BETTER, sequential.WORSE) for d in final.decisions.values()
            )
            seeds_used += [d.seeds for d in final.decisions.values()]
    return NullRow(shape, design_name(design), reports, spurious, float(np.mean(seeds_used)))


def design_name(design: sequential.SequentialDesign) -> str:
    rule = design.rule if design.rule != "paired" else f"paired, {design.spending}, {design.multiplicity}"
    futility = f", futility below {design.futility:.0%}" if design.futility is not None else ""
    return f"sequential {rule}{futility}, looks every {design.look_every} to {design.max_seeds}"


def format_null_rows(rows: Sequence[NullRow], compared: int) -> list[str]:
    """A markdown table: per shape and design, each metric's family-wise rate and its upper 95% bound."""
    lines = [
        f"| shape | design | null reports ({compared} comparisons) | final_return: spurious (95% upper) | "
        "auc_return: spurious (95% upper) | mean seeds a comparison |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = [f"{r.spurious[m]} ({r.rate(m):.1%}; {r.upper(m):.1%})" for m in METRICS]
        lines.append(f"| {r.shape} | {r.design} | {r.reports} | {cells[0]} | {cells[1]} | {r.mean_seeds:.1f} |")
    return lines


@dataclass(frozen=True)
class ShiftRow:
    """One design on one shape with one variant shifted by `shift`: how often and how soon it is decided."""

    shape: str
    design: str
    shift: float
    reports: int
    better: int  # reports that call the shifted variant better
    wrong: int  # reports that call it worse
    mean_seeds: float  # seeds it used: at its decision, or all of them


def shift_study(
    pool: np.ndarray,
    shape: str,
    shift: float,
    designs: Sequence[sequential.SequentialDesign],
    fixed_seeds: Sequence[int],
    reports: int,
    compared: int,
    rng_seed: int,
    metric: str = "final_return",
    crude_looks: Sequence[int] = (),
) -> list[ShiftRow]:
    """Null reports with `shift` added to variant 1's `metric`: the rate each design decides it correctly
    (`crude_looks`: also the crude rule of `crude_calls` at those seed counts)."""
    k = METRICS.index(metric)
    most = max([*fixed_seeds, *crude_looks, *(d.max_seeds for d in designs)])
    draws = draw_reports(pool, reports, compared, most, rng_seed)[:, :, :, k]
    draws[:, 1, :] += shift
    rows = []
    for n in fixed_seeds:
        calls = [fixed_calls(report[:, :n], inference.BONFERRONI)[0] for report in draws]
        rows.append(_shift_row(shape, f"fixed {n} seeds, {inference.BONFERRONI}", shift, calls, [n] * reports))
    if crude_looks:
        crude = [crude_calls(report[:, : max(crude_looks)], crude_looks)[0] for report in draws]
        name = crude_name(crude_looks, compared)
        rows.append(_shift_row(shape, name, shift, [c for c, _ in crude], [n for _, n in crude]))
    for design in designs:
        finals = [sequential_looks(report[:, : design.max_seeds], design)[-1].decisions["v1"] for report in draws]
        rows.append(
            _shift_row(shape, design_name(design), shift, [d.verdict for d in finals], [d.seeds for d in finals])
        )
    return rows


def _shift_row(shape: str, design: str, shift: float, calls: Sequence[str], seeds: Sequence[int]) -> ShiftRow:
    better = sum(c == inference.BETTER for c in calls)
    wrong = sum(c == inference.WORSE for c in calls)
    return ShiftRow(shape, design, shift, len(calls), better, wrong, float(np.mean(seeds)))


def format_shift_rows(rows: Sequence[ShiftRow], compared: int) -> list[str]:
    lines = [
        f"| shape | shift | design | reports ({compared} comparisons, one shifted) | decided better | "
        "called worse | mean seeds of the shifted variant |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.shape} | {r.shift:+g} | {r.design} | {r.reports} | {r.better / r.reports:.1%} | "
            f"{r.wrong / r.reports:.1%} | {r.mean_seeds:.1f} |"
        )
    return lines


@dataclass(frozen=True)
class ReplayRow:
    """A committed campaign replayed through one rule on one metric."""

    campaign: str
    metric: str
    rule: str
    decided: int  # comparisons called better, worse or equivalent
    verdicts: dict[str, str]  # variant -> 'better at look 1 (5 seeds)' and the like
    runs_spent: int  # variant runs the rule would have trained (the reference's not counted)
    runs_fixed: int  # the campaign's variant runs


def replay(
    scores: Mapping[str, Mapping[int, float]], campaign: str, metric: str, design: sequential.SequentialDesign
) -> ReplayRow:
    """`scores` (`{variant: {seed: score}}`, the reference included) fed to `design` look by look."""
    final = sequential.judge_looks(scores, "reference", design)[-1].decisions
    verdicts = {
        v: (
            f"stopped for futility at look {d.look} ({d.seeds} seeds, predictive power {d.predictive_power:.0%})"
            if d.stopped
            else f"{d.verdict} at look {d.look} ({d.seeds} seeds)"
        )
        for v, d in final.items()
    }
    spent = sum(d.seeds for d in final.values())
    fixed = sum(len(s) for v, s in scores.items() if v != "reference")
    decided = sum(d.decided for d in final.values())
    return ReplayRow(campaign, metric, design_name(design), decided, verdicts, spent, fixed)


def _seed_aligned(scores: Mapping[str, Mapping[int, float]]) -> tuple[list[str], list[int], np.ndarray]:
    """A campaign's variants (the reference's rows aside), the seeds every variant has, and the scores on
    them `(1 + len(variants), len(seeds))`, row 0 the reference, seeds aligned by column."""
    variants = [v for v in scores if v != "reference"]
    seeds = sorted(set.intersection(*(set(scores[v]) for v in scores)))
    matrix = np.array([[scores[v][s] for s in seeds] for v in ["reference", *variants]])
    return variants, seeds, matrix


def replay_crude(
    scores: Mapping[str, Mapping[int, float]], campaign: str, metric: str, looks: Sequence[int]
) -> ReplayRow:
    """A campaign through the crude rule (`crude_calls`) at `looks`, on the seeds every variant has."""
    variants, seeds, matrix = _seed_aligned(scores)
    if len(seeds) < max(looks):
        raise StudyError(f"{campaign} has {len(seeds)} seeds every variant ran; the crude looks need {max(looks)}")
    calls = crude_calls(matrix[:, : max(looks)], looks)
    verdicts = {v: f"{c} at {n} seeds" for v, (c, n) in zip(variants, calls)}
    decided = sum(c != sequential.OPEN for c, _ in calls)
    spent = sum(n for _, n in calls)
    return ReplayRow(
        campaign, metric, crude_name(looks, len(variants)), decided, verdicts, spent, len(variants) * len(seeds)
    )


def replay_fixed(scores: Mapping[str, Mapping[int, float]], campaign: str, metric: str, method: str) -> ReplayRow:
    """The fixed rule on all of a campaign's seeds (the report's verdicts on this one environment)."""
    variants, seeds, matrix = _seed_aligned(scores)
    calls = fixed_calls(matrix, method)
    verdicts = {v: f"{c} ({len(seeds)} seeds)" for v, c in zip(variants, calls)}
    decided = sum(c in (inference.BETTER, inference.WORSE, inference.EQUIVALENT) for c in calls)
    runs = len(variants) * len(seeds)
    return ReplayRow(campaign, metric, f"fixed {len(seeds)} seeds, {method}", decided, verdicts, runs, runs)


def format_replay_rows(rows: Sequence[ReplayRow]) -> list[str]:
    lines = [
        "| campaign | metric | rule | comparisons decided | variant runs spent (of the campaign's) | verdicts |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        said = "; ".join(f"{v}: {t}" for v, t in r.verdicts.items() if not t.startswith(("open", "no detectable")))
        lines.append(
            f"| {r.campaign} | {r.metric} | {r.rule} | {r.decided} | {r.runs_spent} of {r.runs_fixed} | {said} |"
        )
    return lines


def folder_env(results_dir: Path) -> str:
    """The one environment a campaign folder holds (a shape is one folder's one environment)."""
    envs = sorted(set(loading.scan_results(results_dir).runs["env"]))
    if len(envs) != 1:
        raise StudyError(f"{results_dir} holds runs of {len(envs)} environments ({', '.join(envs)}); a shape needs one")
    return envs[0]


def parse_rules(
    text: str, look_every: int, max_seeds: int, boundary_draws: int = STUDY_BOUNDARY_DRAWS
) -> list[sequential.SequentialDesign]:
    """'paired:pocock,paired:obrien-fleming:many-to-one,paired:futility=0.1,adastop' -> designs (a paired
    rule may name its spending, its multiplicity and a futility threshold, in any order after the rule)."""
    designs = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        rule, *options = item.split(":")
        fields: dict = {
            "rule": rule,
            "look_every": look_every,
            "max_seeds": max_seeds,
            "boundary_draws": boundary_draws,
        }
        for option in options:
            if option in sequential.SPENDING:
                fields["spending"] = option
            elif option in sequential.MULTIPLICITY:
                fields["multiplicity"] = option
            elif option.startswith("futility="):
                try:
                    fields["futility"] = float(option.removeprefix("futility="))
                except ValueError:
                    raise StudyError(f"{item!r}: futility=P takes a number, such as futility=0.1") from None
            else:
                raise StudyError(
                    f"{item!r}: unknown option {option!r} (a spending: {', '.join(sequential.SPENDING)}; "
                    f"a multiplicity: {', '.join(sequential.MULTIPLICITY)}; or futility=P)"
                )
        designs.append(sequential.SequentialDesign(**fields))
    return designs


def run_null(
    folders: Sequence[Path],
    seeds: Sequence[int],
    designs: Sequence[sequential.SequentialDesign],
    reports: int,
    adastop_reports: int,
    compared: int,
    rng_seed: int = 0,
    methods: Sequence[str] = FIXED_METHODS,
) -> Iterator[str]:
    """The null study's markdown table over `folders` (shapes), fixed `seeds` designs and `designs`,
    a line as each row is measured."""
    yield from format_null_rows([], compared)
    for folder in folders:
        env = folder_env(folder)
        pool = reference_pool(folder, env)
        shape = f"{folder.name} ({len(pool)} runs)"
        for n in seeds:
            for method in methods:
                yield format_null_rows([null_fixed(pool, shape, n, method, reports, compared, rng_seed)], compared)[-1]
        for design in designs:
            count = adastop_reports if design.rule == "adastop" else reports
            row = null_sequential(pool, shape, design, count, compared, rng_seed)
            yield format_null_rows([row], compared)[-1]


def run_shift(
    folders: Sequence[Path],
    shifts: Sequence[float],
    seeds: Sequence[int],
    designs: Sequence[sequential.SequentialDesign],
    reports: int,
    compared: int,
    metric: str,
    rng_seed: int = 0,
    crude_looks: Sequence[int] = (),
) -> list[str]:
    """The shift study's markdown table."""
    rows = []
    for folder in folders:
        env = folder_env(folder)
        pool = reference_pool(folder, env)
        for shift in shifts:
            rows += shift_study(
                pool, f"{folder.name} {metric}", shift, designs, seeds, reports, compared, rng_seed, metric, crude_looks
            )
    return format_shift_rows(rows, compared)


def run_replay(
    folders: Sequence[Path], designs: Sequence[sequential.SequentialDesign], crude_looks: Sequence[int] = ()
) -> list[str]:
    """The replay table: each campaign, metric and rule (the fixed rule on all seeds first, then the
    crude rule at `crude_looks` if given)."""
    rows = []
    for folder in folders:
        env = folder_env(folder)
        scores = campaign_scores(folder, env)
        for metric in METRICS:
            if "reference" not in scores[metric]:
                raise StudyError(f"{folder} holds no reference run of {env}")
            for method in FIXED_METHODS:
                rows.append(replay_fixed(scores[metric], folder.name, metric, method))
            if crude_looks:
                rows.append(replay_crude(scores[metric], folder.name, metric, crude_looks))
            rows += [replay(scores[metric], folder.name, metric, design) for design in designs]
    return format_replay_rows(rows)
