"""Sequential verdicts: judge a grid after every `look_every` seeds and stop each comparison once decided.

A sequential design (`SequentialDesign`) plans looks at K, 2K, ... seeds up to N (`max_seeds`); look j
(1-based) judges the seeds 0 .. n_j - 1 of every comparison still open, n_j = min(j K, N). Each
comparison is one variant against the reference on one metric and environment (or, as an ablation asks,
against another variant: `decide_look`'s `compared`). A rule (`RULES`, by name)
turns the scores seen so far into a `Look`: per comparison a `Decision` (better / worse / equivalent /
open), with the look and seed count at which it was reached. A decision once reached stays; a variant
whose comparisons are all decided needs no more seeds, and the reference runs while any is open.
Every rule holds the family-wise error over all looks and all comparisons of one metric at `alpha`.

Rules:
  paired   the harness's own: per-seed differences d_s = x_s - r_s (common random numbers), and at
           each look simultaneous repeated confidence intervals (Jennison & Turnbull ch. 9):
           mean(d) +- c_j se(d), the critical value c_j from a group-sequential boundary by
           Lan-DeMets alpha spending (`SPENDING`: Pocock type by default, O'Brien-Fleming type on
           request) over the joint normal law of the statistic at every look (the looks correlate
           through the seeds they share, corr sqrt(n_i / n_j)); `boundary` computes it by Monte Carlo
           from a fixed stream. The m comparisons are held together (`MULTIPLICITY`) by Bonferroni,
           alpha / m each (the default), or many-to-one, one boundary over their correlation through the
           shared reference estimated from the first look's per-seed differences. Every look's critical
           value is fixed at the first look. The boundary is calibrated on the t statistics themselves
           (`studentized_boundary`: normal per-seed differences, each look's t on n_j - 1 df, jointly
           over the looks); `boundary`, the known-variance law, is kept and tested against published
           values. Since the intervals of every look and comparison hold at once
           with probability >= 1 - alpha, every claim read off them (better: interval above 0; worse:
           below 0; equivalent: inside [-margin, margin]) shares that one error budget. Alpha spending
           (rather than an anytime-valid confidence sequence) because looks are few and planned: it
           spends the whole budget on them, where a confidence sequence pays for looks never taken.
           Futility (`SequentialDesign.futility`, off by default): after a look before the last, an open
           comparison whose predictive power is below the threshold stops asking for seeds
           (`predictive_power`: the probability that the last look decides it, averaged over what the
           seeds seen say of its true difference; Spiegelhalter, Freedman & Blackburn 1986).
           It is non-binding: the boundary is the one computed without it, a stopped comparison stays
           open, and every claim the grid makes with it is one it would make without it, so the
           family-wise error cannot rise; what it costs is power, measured by the shape studies.
  adastop  AdaStop (Mathieu et al., TMLR 2024) through the `adastop` package: unpaired group-sequential
           permutation tests, step-down over the comparisons, restricted to the comparisons against the
           reference. It gives no interval and no equivalence: what it does not reject stays open.

Shapes: `scores` is `{variant: {seed: score}}` for one metric and environment (normalized scores when
the design has a margin), the reference among the variants.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import stats as sps

from . import inference

OPEN = "open"
BETTER = inference.BETTER
WORSE = inference.WORSE
EQUIVALENT = inference.EQUIVALENT
VERDICTS = (BETTER, WORSE, EQUIVALENT, OPEN)

BOUNDARY_DRAWS = 100_000  # Monte Carlo draws of a boundary: its tail probabilities to about +-0.0007
BOUNDARY_SEED = 20_240_601  # the fixed stream of those draws, so a look is decided the same on a rerun
ADASTOP_PERMUTATIONS = 10_000  # the package's default B
ADASTOP_SEED = 0
# adastop (0.1.3) rejects when max_v |T_v| passes a quantile of the permutation law of max_v T_v, signed:
# one tail's law for a two-sided statistic, so its level is up to twice the alpha it is given (measured
# in docs/statistics.md). By the law's symmetry P(max |T| > c) <= 2 P(max T > c): half the alpha holds it.
ADASTOP_LEVEL_SHARE = 0.5


# --- the design ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SequentialDesign:
    """A sequential grid's plan.

    rule: a key of `RULES`. look_every: seeds added per look (K >= 2). max_seeds: the most seeds a
    comparison gets (N >= K). alpha: family-wise error per metric, over all looks and comparisons.
    margin: equivalence margin (normalized score), None where scores are raw returns (no equivalence).
    spending: a key of `SPENDING` (the paired rule's alpha spending function). boundary_draws: Monte Carlo
    draws of the paired rule's boundary (a study of many grids may trade precision for time).
    multiplicity: a key of `MULTIPLICITY`, how the paired rule holds its m comparisons: 'bonferroni'
    (each comparison's own boundary at alpha / m; the default, the one measured to hold on the
    campaigns' bimodal returns) or 'many-to-one' (one boundary over the comparisons' estimated
    correlation: narrower, and measured at 5.1% on LunarLander-shaped nulls, docs/statistics.md).
    futility: the predictive power below which an open comparison stops asking for seeds after a look
    before the last (module doc; the paired rule only), None (the default) to give every open
    comparison seeds up to max_seeds.
    """

    rule: str = "paired"
    look_every: int = 5
    max_seeds: int = 30
    alpha: float = inference.ALPHA
    margin: float | None = inference.EQUIVALENCE_MARGIN
    spending: str = "pocock"
    boundary_draws: int = BOUNDARY_DRAWS
    multiplicity: str = "bonferroni"
    futility: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown sequential rule {self.rule!r} (known: {', '.join(RULES)})")
        if self.spending not in SPENDING:
            raise ValueError(f"unknown alpha spending {self.spending!r} (known: {', '.join(SPENDING)})")
        if self.look_every < 2:
            raise ValueError(f"--look-every must be at least 2 (a paired t needs 2 seeds), not {self.look_every}")
        if self.max_seeds < self.look_every:
            raise ValueError(f"--max-seeds ({self.max_seeds}) must be at least --look-every ({self.look_every})")
        if self.multiplicity not in MULTIPLICITY:
            raise ValueError(f"unknown multiplicity {self.multiplicity!r} (known: {', '.join(MULTIPLICITY)})")
        if self.boundary_draws < 1000:
            raise ValueError(f"boundary_draws must be at least 1000, not {self.boundary_draws}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), not {self.alpha}")
        if self.margin is not None and self.margin <= 0:
            raise ValueError(f"the equivalence margin must be positive, not {self.margin}")
        if self.futility is not None and not 0 < self.futility < 1:
            raise ValueError(f"--futility is a predictive power: it must lie in (0, 1), not {self.futility}")
        if self.futility is not None and self.rule != "paired":
            raise ValueError(f"--futility needs the paired rule's intervals; the {self.rule} rule gives none")
        if self.rule == "adastop" and self.max_seeds % self.look_every:
            raise ValueError(
                f"the adastop rule adds the same seeds at every look: --max-seeds ({self.max_seeds}) must be "
                f"a multiple of --look-every ({self.look_every})"
            )

    @property
    def looks(self) -> int:
        """How many looks the plan has: ceil(N / K)."""
        return math.ceil(self.max_seeds / self.look_every)

    def seeds_at(self, look: int) -> int:
        """Seeds a comparison has at look `look` (1-based): min(look K, N)."""
        if not 1 <= look <= self.looks:
            raise ValueError(f"look {look} is outside the plan's looks 1..{self.looks}")
        return min(look * self.look_every, self.max_seeds)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> SequentialDesign:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# --- decisions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One comparison (`variant` against the reference, or another variant) after a look.

    verdict: one of `VERDICTS`. difference: mean of the per-seed differences (adastop: difference of
    means). low, high: the simultaneous interval (NaN where the rule gives none). seeds: seeds it was
    judged on. look: the look (1-based) at which the verdict was reached, or the latest look while open.
    stopped: open and stopped for futility at `look` (it asks for no more seeds). predictive_power: the
    probability that the last look decides it, as `predictive_power` computes it after `look` (None
    where the design has no futility threshold, or where it was decided or judged at the last look).
    """

    variant: str
    verdict: str
    difference: float
    low: float
    high: float
    seeds: int
    look: int
    stopped: bool = False
    predictive_power: float | None = None

    @property
    def decided(self) -> bool:
        return self.verdict != OPEN

    def describe(self, design: SequentialDesign) -> str:
        """'better, decided at look 2, 10 seeds' / 'open at the maximum, 30 seeds' / 'open after look 1, 5 seeds'."""
        if self.decided:
            return f"{self.verdict}, decided at look {self.look}, {self.seeds} seeds"
        if self.stopped:
            return (
                f"open, stopped for futility at look {self.look}, {self.seeds} seeds "
                f"(predictive power {self.predictive_power:.0%})"
            )
        if self.seeds >= design.max_seeds or self.look >= design.looks:
            return f"open at the maximum, {self.seeds} seeds"
        return f"open after look {self.look}, {self.seeds} seeds"


@dataclass(frozen=True)
class Look:
    """The state of a sequential grid on one metric and environment after look `index` (1-based).

    decisions: `{comparison_key: Decision}` for every comparison (the key of a variant against the
    reference is its name: every variant but the reference, by default). state: what the rule carries
    to the next look (JSON-able; the paired rule: the critical values spent so far).
    """

    index: int
    reference: str
    design: SequentialDesign
    decisions: dict[str, Decision]
    state: dict = field(default_factory=dict)

    def open_variants(self) -> list[str]:
        """The keys of the comparisons still open and not stopped for futility (by default the variants'
        names): their variants get the next look's seeds."""
        return [v for v, d in self.decisions.items() if not d.decided and not d.stopped]

    @property
    def finished(self) -> bool:
        """Every comparison decided or stopped for futility, or the plan's last look taken."""
        return not self.open_variants() or self.index >= self.design.looks

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "reference": self.reference,
            "design": self.design.to_dict(),
            "decisions": {v: asdict(d) for v, d in self.decisions.items()},
            "state": self.state,
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Look:
        return cls(
            int(data["index"]),
            str(data["reference"]),
            SequentialDesign.from_dict(data["design"]),
            {v: Decision(**d) for v, d in data["decisions"].items()},
            dict(data.get("state", {})),
        )


def decide_look(
    scores: Mapping[str, Mapping[int, float]],
    reference: str,
    look_index: int,
    design: SequentialDesign,
    previous: Look | None = None,
    compared: Sequence[tuple[str, str]] | None = None,
) -> Look:
    """Judge look `look_index` (1-based) of `design` with its rule.

    scores: `{variant: {seed: score}}` of one metric and environment, the reference included; each
    comparison is judged on the seeds below `design.seeds_at(look_index)` that both sides have.
    previous: the look before (None at look 1, or at any look of a rule in REPLAYING_RULES); its
    decisions stand and its state is carried on. compared: the comparisons, (variant, the variant it is
    compared with) pairs (`default_comparisons`: every variant against the reference); an ablation also
    compares the variant less one difference with the variant. Decisions are keyed by `comparison_key`.
    Raises ValueError on a look out of order, a reference without scores, or a compared name without
    scores.
    """
    expected = 1 if previous is None else previous.index + 1
    if look_index != expected and not (previous is None and design.rule in REPLAYING_RULES):
        raise ValueError(f"look {look_index} follows look {expected - 1}; judge the looks in order")
    if reference not in scores or not scores[reference]:
        raise ValueError(f"no scores of the reference {reference!r}")
    pairs = list(compared) if compared is not None else default_comparisons(scores, reference)
    unknown = sorted({name for pair in pairs for name in pair if name not in scores})
    if unknown:
        raise ValueError(f"no scores of {', '.join(unknown)}, which a comparison needs")
    for variant, by_seed in scores.items():
        bad = [s for s, v in by_seed.items() if not math.isfinite(v)]
        if bad:
            raise ValueError(f"{variant} has non-finite scores at seeds {bad} (score failed runs first)")
    return RULES[design.rule](scores, reference, look_index, design, previous, pairs)


def default_comparisons(names: Iterable[str], reference: str) -> list[tuple[str, str]]:
    """Every name but the reference, compared with the reference."""
    return [(v, reference) for v in names if v != reference]


def comparison_key(variant: str, other: str, reference: str) -> str:
    """A comparison's key among a look's decisions: the variant's name where it is compared with the
    reference (every grid's comparisons, and so every looks.json written before others existed), else
    'variant vs other'."""
    return variant if other == reference else f"{variant} vs {other}"


def judge_looks(
    scores: Mapping[str, Mapping[int, float]],
    reference: str,
    design: SequentialDesign,
    compared: Sequence[tuple[str, str]] | None = None,
) -> list[Look]:
    """The looks a grid of `design` would judge on `scores` that hold every seed already (a study's draws,
    a committed campaign replayed), until the grid would stop: look after look while any comparison is
    open, each variant shown the seeds a grid would have given it (`seeds_needed_by`: none past the
    look after which no open comparison needed it). Looks stop at the last one whose seeds the
    reference has (a campaign of 10 seeds replayed to a plan of 20: looks at 5 and 10), since a look's
    critical value holds for its own seed count only. `compared`: as `decide_look`. A replaying rule: its
    last look alone, which holds every decision and the seeds it was reached at."""
    pairs = list(compared) if compared is not None else default_comparisons(scores, reference)
    if design.rule in REPLAYING_RULES:
        return [decide_look(scores, reference, design.looks, design, compared=pairs)]
    looks: list[Look] = []
    shown = {v: math.inf for v in scores}  # a variant's seeds stop where the grid stopped giving it more
    for index in range(1, design.looks + 1):
        if looks and len(scores[reference]) < design.seeds_at(index):
            break
        table = {v: {s: x for s, x in by.items() if s < shown[v]} for v, by in scores.items()}
        looks.append(decide_look(table, reference, index, design, looks[-1] if looks else None, pairs))
        if looks[-1].finished:
            break
        going = set(looks[-1].open_variants())
        needed = seeds_needed_by([pair for pair in pairs if comparison_key(*pair, reference) in going])
        for v in scores:
            if v not in needed:
                shown[v] = min(shown[v], design.seeds_at(index))
    return looks


def seeds_needed_by(going: Iterable[tuple[str, str]]) -> list[str]:
    """The variants that get the next look's seeds while the comparisons `going` ((variant, compared
    with) pairs) are open: both sides of each, the one compared with first, once each."""
    return list(dict.fromkeys(name for variant, other in going for name in (other, variant)))


def _seeds_below(scores: Mapping[int, float], limit: int) -> list[int]:
    return sorted(s for s in scores if s < limit)


def _carried(previous: Look | None, variants: Sequence[str]) -> dict[str, Decision]:
    """The decisions already reached at earlier looks."""
    if previous is None:
        return {}
    return {v: d for v, d in previous.decisions.items() if d.decided and v in variants}


# --- the paired rule -----------------------------------------------------------------------------


def pocock_spending(fraction: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets Pocock-type spending: alpha log(1 + (e - 1) t), spent by information fraction t."""
    return alpha * np.log1p((math.e - 1) * np.asarray(fraction, dtype=np.float64))


def obrien_fleming_spending(fraction: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming-type spending, two-sided and symmetric: each side spends alpha/2 as
    2 - 2 Phi(z_{1 - alpha/4} / sqrt(t)) (the form of the published tables, e.g. gsDesign's sfLDOF)."""
    t = np.maximum(np.asarray(fraction, dtype=np.float64), 1e-12)
    return 4 * sps.norm.sf(sps.norm.isf(alpha / 4) / np.sqrt(t))


SPENDING: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "pocock": pocock_spending,
    "obrien-fleming": obrien_fleming_spending,
}


def boundary(
    fractions: Sequence[float],
    correlation: np.ndarray,
    alpha: float,
    spending: str = "pocock",
    spent: Sequence[float] = (),
    draws: int = BOUNDARY_DRAWS,
    seed: int = BOUNDARY_SEED,
) -> np.ndarray:
    """Two-sided critical values `(J,)` on the normal scale for looks at information `fractions` `(J,)`.

    Under the null each of m comparisons' statistic is a Brownian motion in the information fraction,
    Z_{j,v} = W_v(t_j) / sqrt(t_j), with corr(W_v, W_w) = `correlation` `(m, m)`. c_j is set so that
    P(max_v |Z_{i,v}| > c_i at some look i <= j) = spending(t_j): the family-wise error over looks and
    comparisons is alpha at the last look (t = 1). `spent`: critical values already used at the first
    looks (kept, whatever the correlation estimated since). Monte Carlo over `draws` from a fixed stream.
    """
    t = np.asarray(fractions, dtype=np.float64)
    if t.ndim != 1 or not t.size or np.any(np.diff(t) <= 0) or t[0] <= 0 or t[-1] > 1 + 1e-12:
        raise ValueError(f"information fractions must increase within (0, 1], not {t.tolist()}")
    root = _correlation_root(np.atleast_2d(correlation))
    widths = np.sqrt(np.diff(t, prepend=0.0))
    walk = np.zeros((root.shape[0], draws))  # comparisons x draws: the max over comparisons runs along rows
    largest = np.empty((draws, t.size))  # max over comparisons of |Z| at each look
    for j in range(t.size):
        walk += (root * widths[j]) @ _look_normals(draws, root.shape[0], seed, j)
        largest[:, j] = np.abs(walk).max(axis=0) / math.sqrt(t[j])
    return _spend(largest, SPENDING[spending](t, alpha), spent)


def _spend(largest: np.ndarray, budget: np.ndarray, spent: Sequence[float]) -> np.ndarray:
    """Critical values `(J,)` from the null law's draws `largest` `(draws, J)` (max |statistic| at each
    look) such that the share of draws crossing at some look <= j is at most `budget[j]`; `spent`: the
    critical values of the first looks, kept."""
    draws, looks = largest.shape
    alive = np.ones(draws, dtype=bool)
    out = np.empty(looks)
    for j in range(looks):
        if j < len(spent):
            out[j] = spent[j]
        else:
            crossing = int(math.floor((budget[j] - (1 - alive.mean())) * draws))  # draws it may still cross
            values = np.sort(largest[alive, j])
            out[j] = values[-crossing - 1] if 0 < crossing < values.size else (np.inf if crossing <= 0 else 0.0)
        alive &= largest[:, j] <= out[j]
    return out


def studentized_boundary(
    seeds: Sequence[int],
    correlation: np.ndarray,
    alpha: float,
    spending: str = "pocock",
    draws: int = BOUNDARY_DRAWS,
    seed: int = BOUNDARY_SEED,
) -> np.ndarray:
    """Two-sided critical values `(J,)` on the t scale for paired t statistics at looks of `seeds` `(J,)`
    seeds (increasing; information fraction n_j / n_J).

    The same spending as `boundary`, but over the joint null law of the statistics the rule computes:
    per-seed differences normal with correlation `correlation` `(m, m)` across the m comparisons, and
    at look j each comparison's t = mean / (sd / sqrt(n_j)) with its own sd on n_j - 1 df. The normal
    law of `boundary` (known variance), with each critical value carried to the t scale by its marginal
    tail, understates the chance that some look's t crosses: the t's of a path share their variance
    estimates, and at 5 seeds that matters (docs/statistics.md). Monte Carlo from a fixed stream.
    """
    n = np.asarray(seeds, dtype=np.int64)
    if n.ndim != 1 or not n.size or np.any(np.diff(n) <= 0) or n[0] < 2:
        raise ValueError(f"look seed counts must increase from at least 2, not {n.tolist()}")
    return _studentized_cached(
        tuple(int(k) for k in n), _hashable(correlation), float(alpha), spending, int(draws), int(seed)
    ).copy()


def _hashable(correlation: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in np.atleast_2d(correlation))


@functools.lru_cache(maxsize=32)
def _studentized_cached(
    seeds: tuple[int, ...],
    correlation: tuple[tuple[float, ...], ...],
    alpha: float,
    spending: str,
    draws: int,
    seed: int,
) -> np.ndarray:
    """`studentized_boundary`, cached: the Bonferroni boundary is the same for every grid of a design."""
    n = np.asarray(seeds)
    root = _correlation_root(np.asarray(correlation, dtype=np.float64))
    rng = np.random.default_rng([seed, 1])
    largest = np.empty((draws, n.size))
    chunk = max(1, 2_000_000 // (n[-1] * root.shape[0]))  # draws per block, to bound memory
    for start in range(0, draws, chunk):
        k = min(chunk, draws - start)
        d = np.einsum("mk,nkd->ndm", root, rng.standard_normal((n[-1], root.shape[1], k)))  # seeds x draws x m
        s1 = np.cumsum(d, axis=0)[n - 1]
        s2 = np.cumsum(d * d, axis=0)[n - 1]
        nn = n[:, None, None]
        mean = s1 / nn
        var = np.maximum(s2 - nn * mean**2, 0.0) / (nn - 1)
        stat = np.abs(mean) / np.sqrt(np.maximum(var, 1e-300) / nn)  # looks x draws x m
        largest[start : start + k] = stat.max(axis=2).T
    budget = SPENDING[spending](n / n[-1], alpha)
    # One comparison's first look is a plain t test: its exact quantile, not the draws' noisy one.
    first = (float(sps.t.isf(budget[0] / 2, n[0] - 1)),) if root.shape[0] == 1 else ()
    out = _spend(largest, budget, first)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=16)
def _look_normals(draws: int, m: int, seed: int, look: int) -> np.ndarray:
    """Standard normals `(m, draws)` of one look's increments, from a stream fixed by (seed, look): a
    boundary over more looks reuses the draws of the first ones. Cached, read-only."""
    out = np.random.default_rng([seed, look]).standard_normal((m, draws))
    out.flags.writeable = False
    return out


def _correlation_root(correlation: np.ndarray) -> np.ndarray:
    """A factor L with L L^T = `correlation` (negative eigenvalues of an estimate clipped to 0)."""
    values, vectors = np.linalg.eigh((correlation + correlation.T) / 2)
    return vectors * np.sqrt(np.clip(values, 0.0, None))[None, :]


def difference_correlation(differences: np.ndarray) -> np.ndarray:
    """Sample correlation `(m, m)` of per-seed differences `(n, m)` (seeds x comparisons); a comparison
    with constant differences correlates 0 with the others."""
    d = np.asarray(differences, dtype=np.float64)
    m = d.shape[1]
    if d.shape[0] < 3:
        return np.eye(m)  # too few seeds to estimate: independence, the conservative side for positive ones
    centered = d - d.mean(axis=0)
    scale = np.sqrt((centered**2).sum(axis=0))
    ok = scale > 0
    out = np.eye(m)
    unit = centered[:, ok] / scale[ok]
    out[np.ix_(ok, ok)] = unit.T @ unit
    np.fill_diagonal(out, 1.0)
    return out


def paired_rule(
    scores: Mapping[str, Mapping[int, float]],
    reference: str,
    look_index: int,
    design: SequentialDesign,
    previous: Look | None,
    compared: Sequence[tuple[str, str]],
) -> Look:
    """The paired rule of the module doc, over the comparisons `compared` ((variant, compared with)
    pairs; the per-seed differences of each are variant - compared with).

    The boundary is fixed at the first look, for the plan's every look: the comparisons' correlation
    is estimated from the first look's per-seed differences (the seeds every comparison has), and the
    critical values c_1 .. c_J follow from it and the spending function. state: {'critical_t': [c_1 ..
    c_J] on the t scale, 'correlation': the (m, m) estimate}, carried unchanged to later looks (a look
    stored before the boundary was studentized, with 'critical' on the normal scale, is recomputed).
    """
    limit = design.seeds_at(look_index)
    sides = {comparison_key(v, other, reference): (v, other) for v, other in compared}
    keys = list(sides)
    decisions = _carried(previous, keys)
    pairs = {
        k: sorted(set(_seeds_below(scores[v], limit)) & set(_seeds_below(scores[other], limit)))
        for k, (v, other) in sides.items()
    }
    state = dict(previous.state) if previous is not None and "critical_t" in previous.state else {}
    if not state:
        shared = sorted(set.intersection(*(set(p) for p in pairs.values()))) if keys else []
        columns = np.array([[scores[v][s] - scores[other][s] for v, other in sides.values()] for s in shared])
        correlation = difference_correlation(columns.reshape(len(shared), len(keys))) if keys else np.eye(1)
        looks = [design.seeds_at(i) for i in range(1, design.looks + 1)]
        critical = MULTIPLICITY[design.multiplicity](looks, correlation, design)
        state = {"critical_t": [float(c) for c in critical], "correlation": correlation.tolist()}
    critical_now, critical_last = float(state["critical_t"][look_index - 1]), float(state["critical_t"][-1])
    for k, (v, other) in sides.items():
        if k in decisions:
            continue
        stopped = previous.decisions.get(k) if previous is not None else None
        if stopped is not None and stopped.stopped and len(pairs[k]) <= stopped.seeds:
            decisions[k] = stopped  # stopped for futility and given no seeds since: it stands as it was
            continue
        decisions[k] = _judge_pair(
            v, scores[v], scores[other], pairs[k], (critical_now, critical_last), look_index, design
        )
    return Look(look_index, reference, design, decisions, state)


def _many_to_one_boundary(seeds: Sequence[int], correlation: np.ndarray, design: SequentialDesign) -> np.ndarray:
    """One boundary (t scale) over all m comparisons, through their estimated correlation."""
    return studentized_boundary(seeds, correlation, design.alpha, design.spending, draws=design.boundary_draws)


def _bonferroni_boundary(seeds: Sequence[int], correlation: np.ndarray, design: SequentialDesign) -> np.ndarray:
    """Each comparison's own boundary (t scale) over the looks at alpha / m (the correlation is not used)."""
    share = design.alpha / max(correlation.shape[0], 1)
    return studentized_boundary(seeds, np.eye(1), share, design.spending, draws=design.boundary_draws)


MULTIPLICITY = {"bonferroni": _bonferroni_boundary, "many-to-one": _many_to_one_boundary}


def _judge_pair(
    variant: str,
    x: Mapping[int, float],
    r: Mapping[int, float],
    seeds: Sequence[int],
    critical: tuple[float, float],
    look_index: int,
    design: SequentialDesign,
) -> Decision:
    """One comparison's repeated confidence interval at a look and the verdict it reads; `critical` is
    (this look's critical value, the last look's). Open before the last look, with a futility threshold:
    stopped when its predictive power is below it."""
    d = np.array([x[s] - r[s] for s in seeds], dtype=np.float64)
    if d.size < 2:
        return Decision(variant, OPEN, float(d.mean()) if d.size else math.nan, -math.inf, math.inf, d.size, look_index)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = critical[0] * sd / math.sqrt(d.size) if sd > 0 else 0.0
    low, high = mean - half, mean + half
    verdict = interval_verdict(low, high, design.margin)
    decision = Decision(variant, verdict, mean, low, high, int(d.size), look_index)
    if verdict != OPEN or design.futility is None or look_index >= design.looks:
        return decision
    power = predictive_power(mean, sd, d.size, design.max_seeds, critical[1], design.margin)
    return replace(decision, stopped=power < design.futility, predictive_power=power)


def predictive_power(
    mean: float, sd: float, n: int, final_n: int, final_critical: float, margin: float | None
) -> float:
    """The probability that a comparison seen on `n` seeds (per-seed differences of mean `mean` and sd
    `sd`) is decided at the last look, on `final_n` seeds with critical value `final_critical`: predictive
    power (Spiegelhalter, Freedman & Blackburn 1986; Jennison & Turnbull ch. 10), the chance of deciding
    averaged over what the seeds seen say of the true difference theta (flat prior: theta ~ N(mean,
    sd^2 / n)), where conditional power would take theta = mean as known: from 5 seeds that estimate is
    too rough to plan on (docs/statistics.md, Futility).

    The seeds to come differ by N(theta, sd^2) each, so the last look's mean is M ~ N(mean, sd^2
    (final_n - n) / (final_n n)), and its half-width h = final_critical sd / sqrt(final_n) (the sd taken
    as known): it is decided where |M| > h (better or worse) or |M| < margin - h (equivalent, where the
    design has a margin).
    """
    if n >= final_n:
        raise ValueError(f"predictive power looks ahead: {n} seeds seen, the last look has {final_n}")
    half = final_critical * sd / math.sqrt(final_n)
    inner = 0.0 if margin is None else max(margin - half, 0.0)  # |M| below this: equivalent
    if inner >= half:
        return 1.0  # every M is decided one way or the other
    spread = sd * math.sqrt((final_n - n) / (final_n * n))
    if spread == 0:
        return float(abs(mean) > half or abs(mean) < inner)
    cdf = sps.norm.cdf
    undecided = (cdf((half - mean) / spread) - cdf((inner - mean) / spread)) + (
        cdf((-inner - mean) / spread) - cdf((-half - mean) / spread)
    )
    return float(min(max(1.0 - undecided, 0.0), 1.0))


def interval_verdict(low: float, high: float, margin: float | None) -> str:
    """The verdict an interval [low, high] of (variant - reference) reads: better above zero, worse below,
    equivalent inside [-margin, margin] (never where margin is None), open otherwise."""
    if low > 0:
        return BETTER
    if high < 0:
        return WORSE
    if margin is not None and -margin <= low and high <= margin:
        return EQUIVALENT
    return OPEN


# --- the adastop rule ----------------------------------------------------------------------------


def adastop_rule(
    scores: Mapping[str, Mapping[int, float]],
    reference: str,
    look_index: int,
    design: SequentialDesign,
    previous: Look | None,
    compared: Sequence[tuple[str, str]],
) -> Look:
    """AdaStop over the comparisons against the reference, replayed from look 1 (the package keeps its
    permutation state in memory; a replay from a fixed seed gives a resumed grid the same decisions).

    Each look feeds the package `look_every` new seeds a variant (in seed order); a comparison the
    package rejects is better or worse (the sign of the difference of means), the rest stay open (its
    closing 'equal' at the last look means not rejected, not equivalent). The package is given
    alpha * ADASTOP_LEVEL_SHARE, which holds the family-wise error at alpha (see that constant).
    state: {} (nothing carried).
    """
    from adastop import MultipleAgentsComparator  # imported here: only this rule needs it

    if list(compared) != default_comparisons(scores, reference):
        raise ValueError("the adastop rule compares every variant with the reference only; use the paired rule")

    variants = [v for v in scores if v != reference]
    names = [reference, *variants]
    comparator = MultipleAgentsComparator(
        n=design.look_every,
        K=design.looks,
        B=ADASTOP_PERMUTATIONS,
        comparisons=np.array([(i, 0) for i in range(1, len(names))]),
        alpha=design.alpha * ADASTOP_LEVEL_SHARE,
        seed=ADASTOP_SEED,
    )
    decided_at: dict[str, tuple[str, int]] = {}
    for look in range(1, look_index + 1):
        limit = look * design.look_every  # the package wants exactly look * n values a side
        values = {name: np.array([scores[name][s] for s in _seeds_below(scores[name], limit)]) for name in names}
        if any(values[n].size < limit for n in _adastop_open(names, decided_at)):
            break  # a look without its seeds (the last look of N not a multiple of K): judged no further
        comparator.partial_compare(values, verbose=False)
        for i, v in enumerate(variants, start=1):
            said = comparator.decisions[str(np.array([i, 0]))]
            if v not in decided_at and said in ("larger", "smaller"):
                decided_at[v] = (BETTER if said == "larger" else WORSE, look)
        if comparator.is_finished and look < design.looks:
            break
    decisions = {}
    for v in variants:
        verdict, look = decided_at.get(v, (OPEN, look_index))
        seeds = _seeds_below(scores[v], look * design.look_every)
        ref = _seeds_below(scores[reference], look * design.look_every)
        diff = float(np.mean([scores[v][s] for s in seeds]) - np.mean([scores[reference][s] for s in ref]))
        decisions[v] = Decision(v, verdict, diff, math.nan, math.nan, len(seeds), look)
    return Look(look_index, reference, design, decisions, {})


def _adastop_open(names: Sequence[str], decided_at: Mapping[str, tuple[str, int]]) -> list[str]:
    return [names[0], *(n for n in names[1:] if n not in decided_at)]


RuleFunction = Callable[
    [Mapping[str, Mapping[int, float]], str, int, SequentialDesign, Look | None, Sequence[tuple[str, str]]], Look
]
RULES: dict[str, RuleFunction] = {"paired": paired_rule, "adastop": adastop_rule}
# What the null studies measured of a rule that does not hold its level (docs/statistics.md): a grid
# that asks for it is told so before it trains.
LEVEL_CAUTIONS: dict[str, str] = {
    "adastop": (
        "the adastop rule's family-wise error measured 6.6-8.6% (not 5%) on null grids of the "
        "LunarLander, BipedalWalker and Pendulum shapes with looks every 5 seeds to 30, even at half its "
        "level (docs/statistics.md); the paired rule (the default) holds 5% on them"
    ),
}

# Rules that judge look k by replaying looks 1..k from the scores alone (they carry no state): their
# look k can be asked for directly, with no look before it.
REPLAYING_RULES = frozenset({"adastop"})
