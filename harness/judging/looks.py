"""The looks of a sequential grid (`harness run --until-decided`): judged from run records, kept on disk.

A sequential grid trains seeds look by look (harness.sequential_grid) and, after each look, judges every
open comparison (a variant against the reference, per env and metric) with a rule of
`harness.judging.sequential`. What each look decided is written to `<results>/looks.json` atomically, so
that a killed grid resumes to the same decisions and `harness status` / `harness report` say which
comparison was decided when ("worse, decided at look 1, 2 seeds"; "open at the maximum, 6 seeds"):

    {"design": {SequentialDesign fields, "reference": str, "metrics": [str], "envs": [str], "variants": [str],
                "compared": [[variant, compared with], ...]},  # only where not every variant against the reference
     "looks": [{"look": 1,
                "seeds": {env: {variant: n}},           # seeds 0..n-1 each variant had when judged
                "judged": {env: {metric: Look.to_dict()}},  # the rule's state after this look
                "failures": {env: {variant: {"look": j, "seeds": n, "reason": str}}}}, ...],
     "end": null | "decided" | "maximum" | "futility"}

Every look's entry holds the whole picture (earlier decisions carried on), so the last entry says where
each comparison stands. The file is standard JSON: a non-finite number (an interval end the rule left
infinite, a difference of no seeds) is the string "inf", "-inf" or "nan" in the fields that can hold one
(a decision's difference, low and high, and the rule's state, which holds numbers only); files written
with bare `Infinity` / `NaN` tokens by earlier versions are still read.

A variant whose every run of a look failed with the same error at the same step (an exception that
recurs, as critic-first's in-place error at its first update; the same error up to the numbers in its
message, `failure_signature`) is closed as worse on that basis, outside
the rule and its error budget: a software failure, not noise. Scores are the report's
(`stats.scored_runs`: failed and diverged runs scored too), normalized when the design has an
equivalence margin. The rule judges one env at a time; over several envs its alpha is split evenly among
them (`env_design`), so the family-wise error per metric over every env, look and comparison stays at most
the design's alpha.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from .. import records
from . import normalization, sequential, stats
from .loading import RunRecords

nan = math.nan

LOOKS_FILE = "looks.json"
END_DECIDED = "decided"  # every comparison decided
END_MAXIMUM = "maximum"  # the plan's last look taken with some comparison still open
END_FUTILITY = "futility"  # every comparison decided or stopped for futility, some of them open
FAILURE = "failure"  # the basis of a closure by a recurring failure
RULE = "rule"


class LooksError(ValueError):
    """looks.json cannot be read, or a look cannot be judged (one line)."""


@dataclass(frozen=True)
class FailureClosure:
    """A variant closed as worse because every run of a look failed with the same error at the same step."""

    look: int
    seeds: int
    reason: str


@dataclass(frozen=True)
class LookRecord:
    look: int  # 1-based
    seeds: dict[str, dict[str, int]]  # env -> variant -> seeds 0..n-1 given so far
    judged: dict[str, dict[str, sequential.Look]]  # env -> metric -> the rule's look (carried when not judged)
    failures: dict[str, dict[str, FailureClosure]]  # env -> variant -> its closure (carried on)


@dataclass(frozen=True)
class Looks:
    """A sequential grid's design (`design_record`) and every look judged so far."""

    design: dict
    looks: tuple[LookRecord, ...] = ()
    end: str | None = None  # None while looks remain

    @property
    def rule_design(self) -> sequential.SequentialDesign:
        return sequential.SequentialDesign.from_dict(self.design)

    @property
    def reference(self) -> str:
        return str(self.design["reference"])

    @property
    def compared(self) -> list[tuple[str, str]]:
        """The comparisons, (variant, the variant it is compared with) pairs: the design's "compared"
        where it records one (an ablation's), else every variant against the reference."""
        if "compared" in self.design:
            return [(str(v), str(a)) for v, a in self.design["compared"]]
        return sequential.default_comparisons(self.design["variants"], self.reference)

    def seeds_given(self, env: str) -> dict[str, int]:
        """variant -> seeds 0..n-1 it had in `env` by the last look ({} before the first)."""
        return dict(self.looks[-1].seeds.get(env, {})) if self.looks else {}


@dataclass(frozen=True)
class Comparison:
    """Where one comparison stands after the last look: one row of `comparisons`."""

    env: str
    variant: str
    metric: str
    verdict: str  # better, worse, equivalent or open
    difference: float  # mean per-seed difference (normalized score), NaN where none
    low: float  # the rule's simultaneous interval (NaN where it gives none)
    high: float
    seeds: int  # seeds judged
    look: int  # the look that decided it (the latest look while open; 0 before the first)
    basis: str  # RULE or FAILURE
    note: str  # the failure, for FAILURE
    against: str  # the variant it is compared with: the reference, or another (`Looks.compared`)
    stopped: bool = False  # open and stopped for futility at `look` (sequential.Decision.stopped)
    predictive_power: float | None = None  # judged open before the last look, with a threshold


def design_record(
    design: sequential.SequentialDesign,
    reference: str,
    envs: Sequence[str],
    variants: Sequence[str],
    compared: Sequence[tuple[str, str]] | None = None,
) -> dict:
    """The design as looks.json records it: the rule's fields, the reference, the metrics, envs and
    variants, and `compared` ((variant, compared with) pairs) where it is not every variant against the
    reference."""
    default = sequential.default_comparisons(variants, reference)
    pairs = [list(pair) for pair in compared] if compared is not None and list(compared) != default else []
    return (
        design.to_dict()
        | {
            "reference": reference,
            "metrics": list(stats.RETURN_METRICS),
            "envs": list(envs),
            "variants": [v for v in variants if v != reference],
        }
        | ({"compared": pairs} if pairs else {})
    )


def design_difference(recorded: Mapping, asked: Mapping) -> str | None:
    """None when two design records agree; else one line naming the fields that differ."""
    keys = sorted(k for k in set(recorded) | set(asked) if recorded.get(k) != asked.get(k))
    if not keys:
        return None
    return "; ".join(f"{k} {recorded.get(k)!r} there, {asked.get(k)!r} now" for k in keys)


# --- on disk -------------------------------------------------------------------------------------


def looks_path(results: Path) -> Path:
    return Path(results) / LOOKS_FILE


# Standard JSON has no token for a non-finite number (Python's `Infinity` / `NaN` are rejected by other
# languages' parsers), so those are written as strings. A finite float is written as its repr and an
# infinity or NaN as its name, so a resumed grid reads the rule's state back exactly.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_DECISION_FLOATS = ("difference", "low", "high")


def _finite_json(value: object) -> object:
    """`value` (a JSON-able tree) with every non-finite float as the string "inf", "-inf" or "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(v) for v in value]
    return value


def _numbers_json(value: object) -> object:
    """The inverse of `_finite_json` on a tree of numbers: "inf", "-inf" and "nan" back to floats. Applied
    only where a string can stand for nothing else (a variant may be named "inf")."""
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, Mapping):
        return {k: _numbers_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_json(v) for v in value]
    return value


def _rule_json(rule: sequential.Look) -> dict:
    data = rule.to_dict()
    decisions = {v: d | {k: _finite_json(d[k]) for k in _DECISION_FLOATS} for v, d in data["decisions"].items()}
    return data | {"decisions": decisions, "state": _finite_json(data["state"])}


def _rule_from_json(data: Mapping) -> sequential.Look:
    decisions = {
        v: dict(d) | {k: _numbers_json(d[k]) for k in _DECISION_FLOATS if k in d} for v, d in data["decisions"].items()
    }
    return sequential.Look.from_dict(
        dict(data) | {"decisions": decisions, "state": _numbers_json(data.get("state", {}))}
    )


def _look_json(look: LookRecord) -> dict:
    return {
        "look": look.look,
        "seeds": look.seeds,
        "judged": {env: {m: _rule_json(rule) for m, rule in by.items()} for env, by in look.judged.items()},
        "failures": {env: {v: asdict(c) for v, c in by.items()} for env, by in look.failures.items()},
    }


def _look_from_json(data: Mapping) -> LookRecord:
    return LookRecord(
        int(data["look"]),
        {str(e): {str(v): int(n) for v, n in by.items()} for e, by in data["seeds"].items()},
        {e: {m: _rule_from_json(r) for m, r in by.items()} for e, by in data["judged"].items()},
        {e: {v: FailureClosure(**c) for v, c in by.items()} for e, by in data["failures"].items()},
    )


def write_looks(results: Path, state: Looks) -> None:
    """Write `state` to `<results>/looks.json` atomically (the old file or the new one, never half), as
    standard JSON: a non-finite number is written "inf", "-inf" or "nan" (module doc)."""
    data = {"design": state.design, "looks": [_look_json(look) for look in state.looks], "end": state.end}
    # allow_nan=False: a non-finite number outside the fields that encode one is a bug to hear of, not
    # a token to slip into the file.
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False)
    records.atomic_write_text(looks_path(results), text + "\n")


def read_looks(results: Path) -> Looks | None:
    """The looks recorded in `results`, or None when it holds no looks.json (not a sequential grid).
    Raises LooksError when the file is not valid JSON of the documented shape."""
    path = looks_path(results)
    if not path.exists():
        return None
    try:
        raw = records.read_json(path)
        return Looks(dict(raw["design"]), tuple(_look_from_json(look) for look in raw["looks"]), raw.get("end"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LooksError(f"{path} is not a readable record of looks ({type(exc).__name__}: {exc})") from None


# --- judging a look ------------------------------------------------------------------------------


def open_variants(state: Looks) -> dict[str, list[str]]:
    """env -> the variants that get the next look's seeds: those with a comparison still open there and
    not stopped for futility while the design has a threshold (every one before the first look), and the
    variants they are compared with (the reference, or `Looks.compared`'s). Envs with none are left out."""
    futility = state.rule_design.futility is not None  # turned off on a resumed grid: the stopped go on
    latest = {
        (c.env, c.variant, c.against)
        for c in comparisons(state)
        if c.verdict == sequential.OPEN and not (futility and c.stopped)
    }
    out: dict[str, list[str]] = {}
    for env in state.design["envs"]:
        going = [(v, a) for v, a in state.compared if not state.looks or (env, v, a) in latest]
        if going:
            out[env] = sequential.seeds_needed_by(going)
    return out


def failure_signature(reason: str) -> str:
    """What makes two failures the same error: `loading.failure_reason`'s line with every number of the
    message written '#', the step kept. The numbers an exception's message carries can differ between
    runs of one bug: PyTorch's in-place error names the tensor's shape, which holds the job's member count,
    and its version counter ('[torch.FloatTensor [2, 28, 256]] is at version 1; expected version 0' and
    '... [8, 23, 256] is at version 2; expected version 1', critic-first's at its first update)."""
    step = re.search(r" \(at step \d+\)$", reason)
    message = reason[: step.start()] if step else reason
    return re.sub(r"\d+", "#", message) + (step.group(0) if step else "")


def recurring_failure(runs: pd.DataFrame, env: str, variant: str, reference: str, n: int) -> str | None:
    """The failure of `variant`'s runs of seeds 0..n-1 in `env` (the first seed's reason) when every one of
    them (n >= 2) failed with the same error (`failure_signature`) at the same step and the reference's
    runs did not; else None.

    runs: `loading.RUN_COLUMNS` rows (state, reason)."""
    mine = runs[(runs["env"] == env) & (runs["variant"] == variant) & (runs["seed"] < n)]
    if n < 2 or len(mine) < n or (mine["state"] != "failed").any():
        return None
    signatures = {failure_signature(str(reason)) for reason in mine["reason"]}
    if len(signatures) != 1:
        return None
    ref = runs[(runs["env"] == env) & (runs["variant"] == reference) & (runs["seed"] < n)]
    if len(ref) and all(failure_signature(str(reason)) in signatures for reason in ref["reason"]):
        return None
    return str(mine.sort_values("seed")["reason"].iloc[0])


def look_scores(runs: pd.DataFrame, env: str, metric: str, seeds: Mapping[str, int], normalize: bool) -> dict:
    """`{variant: {seed: score}}` of `metric` in `env`, each variant's seeds below its count in `seeds`.

    runs: scored runs (`stats.scored_runs`); normalized scores when `normalize`."""
    out = {}
    for variant, n in seeds.items():
        cell = runs[(runs["env"] == env) & (runs["variant"] == variant) & (runs["seed"] < n)]
        values = cell[metric].to_numpy(dtype=float)
        if normalize:
            values = normalization.normalized_score(values, env)
        out[variant] = dict(zip(cell["seed"].astype(int).tolist(), values.tolist()))
    return out


def env_design(state: Looks) -> sequential.SequentialDesign:
    """The design each env's comparisons are judged with: the rule judges one env at a time, so its alpha
    is split evenly over the envs (Bonferroni) and the family-wise error per metric over every env, look
    and comparison stays at most the design's alpha."""
    design = state.rule_design
    return dataclasses.replace(design, alpha=design.alpha / max(1, len(state.design["envs"])))


def judge_look(state: Looks, data: RunRecords, seeds: Mapping[str, Mapping[str, int]]) -> LookRecord:
    """The next look of `state`, judged on the run records `data` with the seed counts `seeds` (env ->
    variant -> n, for the envs trained at this look), each env with `env_design`. Raises LooksError when
    a score is missing or not finite."""
    design, reference = env_design(state), state.reference
    look = len(state.looks) + 1
    last = state.looks[-1] if state.looks else LookRecord(0, {}, {}, {})
    all_seeds = {env: {**last.seeds.get(env, {}), **seeds.get(env, {})} for env in {*last.seeds, *seeds}}
    judged = {env: dict(by) for env, by in last.judged.items()}
    failures = {env: dict(by) for env, by in last.failures.items()}
    recorded_targets, recorded_randoms, _ = normalization.recorded(data.configs)
    with normalization.extended(recorded_targets, recorded_randoms):
        runs = stats.scored_runs(data)
        for env, trained in seeds.items():
            closed = failures.setdefault(env, {})
            for variant in trained:
                reason = (
                    None if variant == reference else recurring_failure(runs, env, variant, reference, trained[variant])
                )
                if reason:
                    closed[variant] = FailureClosure(look, trained[variant], reason)
            given = {v: n for v, n in all_seeds[env].items() if v not in closed}
            # a comparison with a variant closed by failure: judged no further
            compared = [(v, a) for v, a in state.compared if v in given and a in given]
            for metric in state.design["metrics"]:
                scores = look_scores(runs, env, metric, given, design.margin is not None)
                missing = [v for v, n in given.items() if len(scores[v]) < n]
                if missing:
                    raise LooksError(f"look {look}: {env} {', '.join(missing)} lack scored runs of their seeds")
                if not compared:
                    continue  # every comparison in env closed by failure: nothing for the rule
                try:
                    judged.setdefault(env, {})[metric] = sequential.decide_look(
                        scores, reference, look, design, judged.get(env, {}).get(metric), compared
                    )
                except ValueError as exc:
                    raise LooksError(f"look {look}: {env} {metric}: {exc}") from None
    return LookRecord(look, all_seeds, judged, failures)


# --- where each comparison stands: what status and the report say ----------------------------------


def comparisons(state: Looks) -> list[Comparison]:
    """Every comparison of the design after the last look, in design order (env, comparison, metric)."""
    last = state.looks[-1] if state.looks else LookRecord(0, {}, {}, {})
    out = []
    for env in state.design["envs"]:
        for variant, other in state.compared:
            closure = last.failures.get(env, {}).get(variant)
            key = sequential.comparison_key(variant, other, state.reference)
            for metric in state.design["metrics"]:
                rule_look = last.judged.get(env, {}).get(metric)
                decision = rule_look.decisions.get(key) if rule_look else None
                if closure is not None:
                    row = (sequential.WORSE, nan, nan, nan, closure.seeds, closure.look, FAILURE, closure.reason, other)
                elif decision is not None:
                    row = (
                        decision.verdict,
                        decision.difference,
                        decision.low,
                        decision.high,
                        decision.seeds,
                        decision.look,
                        RULE,
                        "",
                        other,
                        decision.stopped,
                        decision.predictive_power,
                    )
                else:
                    row = (sequential.OPEN, nan, nan, nan, 0, last.look, RULE, "", other)
                out.append(Comparison(env, variant, metric, *row))
    return out


def short_failure(reason: str) -> str:
    """'RuntimeError at step 1001' from `loading.failure_reason`'s 'RuntimeError: one of ... (at step 1001)'."""
    head = reason.split(":", 1)[0].strip()
    step = re.search(r"\(at step \d+\)$", reason)
    if len(head) > 60:
        head = head[:57] + "..."
    return head + (" " + step.group(0)[1:-1] if step else "")


def comparison_text(c: Comparison, state: Looks) -> str:
    """'worse, decided at look 1, 2 seeds (every run failed: ...)', 'equivalent, decided at look 2, 4
    seeds, difference +0.003 [-0.021, +0.027]', 'open at the maximum, 6 seeds, ...' or 'open after look
    1, 2 seeds, ... (more looks to come)'."""
    numbers = f", difference {c.difference:+.3f}" if math.isfinite(c.difference) else ""
    if math.isfinite(c.low) and math.isfinite(c.high):
        numbers += f" [{c.low:+.3f}, {c.high:+.3f}]"
    if c.basis == FAILURE:
        return f"{c.verdict}, decided at look {c.look}, {c.seeds} seeds (every run failed: {short_failure(c.note)})"
    if c.verdict != sequential.OPEN:
        return f"{c.verdict}, decided at look {c.look}, {c.seeds} seeds{numbers}"
    if c.stopped:
        return (
            f"open, stopped for futility at look {c.look}, {c.seeds} seeds{numbers} (predictive power "
            f"{c.predictive_power:.0%} at {state.rule_design.max_seeds} seeds)"
        )
    if state.end == END_MAXIMUM:
        return f"open at the maximum, {c.seeds} seeds{numbers}"
    return f"open after look {c.look}, {c.seeds} seeds{numbers} (more looks to come)"


def summary_lines(state: Looks) -> list[str]:
    """A line for the design and where the grid stands, then one per comparison once a look has judged
    them (before the first, every comparison would read 'open after look 0, 0 seeds')."""
    design = state.rule_design
    n = len(state.looks)
    where = {
        None: f"{n} of at most {design.looks} looks judged; a rerun of the grid's command goes on",
        END_DECIDED: f"stopped after look {n}: every comparison decided",
        END_MAXIMUM: f"stopped after look {n}: the maximum of {design.max_seeds} seeds reached",
        END_FUTILITY: f"stopped after look {n}: every comparison decided or stopped for futility",
    }.get(state.end, f"end {state.end!r}")
    envs = len(state.design["envs"])
    split = f" (split evenly over {envs} envs)" if envs > 1 else ""
    lines = [
        f"sequential grid: {design.rule} rule, a look every {design.look_every} seeds up to {design.max_seeds}, "
        f"family-wise error {design.alpha:g} per metric over all looks and comparisons{split}"
        + (
            f", futility below {design.futility:.0%} predictive power (non-binding)"
            if design.futility is not None
            else ""
        )
        + f"; {where}"
    ]
    for c in comparisons(state) if state.looks else ():
        lines.append(f"  {c.env} {c.variant} vs {c.against}, {c.metric}: {comparison_text(c, state)}")
    return lines


def comparison_frame(state: Looks) -> pd.DataFrame:
    """`comparisons` as a frame (the columns of `Comparison`), for a report's looks.csv."""
    return pd.DataFrame([asdict(c) for c in comparisons(state)], columns=list(Comparison.__dataclass_fields__))
