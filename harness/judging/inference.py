"""Verdicts with a stated error rate: per-seed paired differences, simultaneous intervals over a report's
family of comparisons, equivalence within a margin, and the power of the design.

The seed is the unit. Runs of different variants with the same seed share their environment and
evaluation reset seeds (common random numbers), so where both sides have a seed the comparison is the
per-seed difference X_k - Y_k; where the seeds do not match it falls back to Welch's unpaired t.

The rule (`decide`): a report compares m (variant, environment) cells; each gets a two-sided t
interval of the mean difference at level 1 - alpha/m (Bonferroni), so all m intervals hold at once
with probability >= 1 - alpha whatever the dependence between cells. A cell is
  better / worse          when its interval lies above / below 0 (and, where it also lies inside
                          [-d, d], said to be too small to matter: `Decision.negligible`),
  equivalent within d     when it lies inside [-d, d] and contains 0,
  no detectable difference otherwise, with the minimum detectable difference (80% power at the same
                          level) saying how large a difference the runs could have missed.
Under the null the family-wise rate of any spurious better/worse is at most alpha (exactly, for normal
differences; the null study in the README measures it on real runs), and a false "equivalent" needs a
true difference beyond d, at most alpha / 2.

Arrays: `x`, `y` are `(n,)` scores of one side's runs; paired arrays are aligned by seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps

ALPHA = 0.05  # family-wise level of a report
POWER = 0.8  # the power at which a minimum detectable difference is quoted
EQUIVALENCE_MARGIN = 0.05  # normalized score: a difference smaller than this does not matter in practice
TARGET_DIFFERENCE = 0.1  # normalized score: the difference the design should be able to detect
MIN_PAIRS = 3  # fewer common seeds than this: compare unpaired

BETTER = "better"
WORSE = "worse"
EQUIVALENT = "equivalent"
NO_DIFFERENCE = "no detectable difference"


@dataclass(frozen=True)
class Test:
    """A comparison of X against Y on one task (or pooled over tasks).

    difference: mean(X) - mean(Y) (paired: the mean of the per-seed differences).
    se: its standard error; df: degrees of freedom of the t distribution of difference / se.
    paired: whether seeds were matched; n_x, n_y: runs used (both the number of pairs when paired).
    spread: the per-run scale behind se (paired: sd of the differences; unpaired: sqrt(s_x^2 + s_y^2)),
        which `seeds_needed` scales by the number of runs.
    """

    difference: float
    se: float
    df: float
    paired: bool
    n_x: int
    n_y: int
    spread: float

    def p_value(self) -> float:
        """Two-sided p-value of difference = 0."""
        if self.se == 0:
            return 1.0 if self.difference == 0 else 0.0
        return float(2 * sps.t.sf(abs(self.difference) / self.se, self.df))

    def interval(self, level: float) -> tuple[float, float]:
        """Two-sided t interval of the difference at confidence `level`."""
        half = float(sps.t.ppf(0.5 + level / 2, self.df)) * self.se
        return self.difference - half, self.difference + half


def paired_test(x: np.ndarray, y: np.ndarray) -> Test:
    """Student's paired t on the per-seed differences x_k - y_k; x, y: `(n,)`, n >= 2, aligned by seed."""
    d = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    n = d.size
    if n < 2:
        raise ValueError("a paired test needs at least 2 pairs")
    sd = float(np.std(d, ddof=1))
    return Test(float(d.mean()), sd / math.sqrt(n), n - 1, True, n, n, sd)


def welch_test(x: np.ndarray, y: np.ndarray) -> Test:
    """Welch's unpaired t; x: `(n_x,)`, y: `(n_y,)`, each with at least 2 runs."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        raise ValueError("an unpaired test needs at least 2 runs a side")
    vx, vy = np.var(x, ddof=1) / x.size, np.var(y, ddof=1) / y.size
    se = math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1)) if se > 0 else float(x.size + y.size - 2)
    spread = math.sqrt(np.var(x, ddof=1) + np.var(y, ddof=1))
    return Test(float(x.mean() - y.mean()), se, float(df), False, x.size, y.size, spread)


def compare_by_seed(x: Mapping[int, float], y: Mapping[int, float], min_pairs: int = MIN_PAIRS) -> Test:
    """Paired on the seeds both sides have when there are at least `min_pairs` of them, else Welch on all.

    x, y: `{seed: score}` of each side's runs.
    """
    xs, ys = aligned_by_seed(x, y)
    if xs.size >= min_pairs:
        return paired_test(xs, ys)
    return welch_test(np.array(list(x.values())), np.array(list(y.values())))


def aligned_by_seed(x: Mapping[int, float], y: Mapping[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """The scores of the seeds both sides have, in seed order: two `(n_common,)` arrays."""
    common = sorted(set(x) & set(y))
    return np.array([x[s] for s in common], dtype=np.float64), np.array([y[s] for s in common], dtype=np.float64)


def pooled_test(tests: Sequence[Test]) -> Test:
    """The mean over tasks of each task's difference: se = sqrt(sum se_t^2) / T, Welch-Satterthwaite df."""
    if not tests:
        raise ValueError("nothing to pool")
    if len(tests) == 1:
        return tests[0]
    t = len(tests)
    var = sum(s.se**2 for s in tests)
    denom = sum(s.se**4 / s.df for s in tests)
    df = var**2 / denom if denom > 0 else float(sum(s.df for s in tests))
    return Test(
        float(np.mean([s.difference for s in tests])),
        math.sqrt(var) / t,
        float(df),
        all(s.paired for s in tests),
        sum(s.n_x for s in tests),
        sum(s.n_y for s in tests),
        float(math.sqrt(sum(s.spread**2 for s in tests)) / t),
    )


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values, `(m,)` in the input order: reject where adjusted <= alpha.

    The k-th smallest p (k = 1..m) is multiplied by m - k + 1, made non-decreasing along that order,
    and capped at 1.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def minimum_detectable_difference(se: float, df: float, level: float, power: float = POWER) -> float:
    """The true difference that a two-sided t test at confidence `level` detects with probability `power`.

    Solves P(|T| > t_crit) = power for T noncentral t with `df` and noncentrality difference / se.
    """
    if se == 0:
        return 0.0
    crit = float(sps.t.ppf(0.5 + level / 2, df))

    def shortfall(ncp: float) -> float:
        # The lower tail vanishes (and scipy's nct returns NaN there) as the noncentrality grows.
        lower = float(np.nan_to_num(sps.nct.cdf(-crit, df, ncp)))
        return float(sps.nct.sf(crit, df, ncp)) + lower - power

    high = crit + 1.0
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high)) * se


SEEDS_SEARCHED = 1000  # seeds_needed looks no further: past it, more seeds is not a plan


def seeds_needed(
    test: Test, target: float, level: float, power: float = POWER, most: int = SEEDS_SEARCHED
) -> int | None:
    """Seeds (pairs, or runs a side) at which `target` would be detected with `power`, at this test's
    spread, or None if more than `most`. Paired: se = spread / sqrt(n), df = n - 1; unpaired with n a
    side: se = spread / sqrt(n), df = 2n - 2."""
    if test.spread == 0:
        return 2

    def detects(n: int) -> bool:
        df = n - 1 if test.paired else 2 * n - 2
        return minimum_detectable_difference(test.spread / math.sqrt(n), df, level, power) <= target

    if not detects(most):
        return None
    low, high = 1, most  # detects(high); the detectable difference shrinks as n grows
    while high - low > 1:
        mid = (low + high) // 2
        if mid >= 2 and detects(mid):
            high = mid
        else:
            low = mid
    return high


BONFERRONI = "Bonferroni"
MANY_TO_ONE = "many-to-one max-t"
SIMULTANEOUS_DRAWS = 200_000  # Monte Carlo draws of a max-t critical value: its level to about +-0.0005
SIMULTANEOUS_SEED = 20_240_601  # their fixed stream, so a rebuilt report gives identical intervals


@dataclass(frozen=True)
class Decision:
    """The verdict of one test within a family of `family_size` tests at family-wise level `alpha`."""

    verdict: str
    low: float  # simultaneous interval of the difference (at the family's per-comparison level)
    high: float
    p_value: float  # unadjusted two-sided
    p_adjusted: float  # Bonferroni: min(1, family_size * p); many-to-one: P(max |Z| >= this test's |z|)
    mdd: float  # minimum detectable difference at the same level and POWER
    family_size: int
    negligible: bool = False  # the interval lies inside the margin: real (if better/worse) but too small to matter
    method: str = BONFERRONI
    level: float = math.nan  # the per-comparison confidence level of the intervals


def max_abs_draws(
    correlation: np.ndarray, df: float | None = None, draws: int = SIMULTANEOUS_DRAWS, seed: int = SIMULTANEOUS_SEED
) -> np.ndarray:
    """Sorted draws `(draws,)` of max_v |T_v| for T = Z / sqrt(W / df), Z ~ N(0, `correlation` (m, m)),
    W ~ chi2(df) shared by all m (Dunnett's multivariate t, exact for a pooled variance estimate);
    df None: the normal limit. Negative eigenvalues of an estimated correlation are clipped to 0."""
    corr = np.atleast_2d(np.asarray(correlation, dtype=np.float64))
    values, vectors = np.linalg.eigh((corr + corr.T) / 2)
    root = vectors * np.sqrt(np.clip(values, 0.0, None))[None, :]
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((draws, corr.shape[0])) @ root.T
    if df is not None and math.isfinite(df):
        z /= np.sqrt(rng.chisquare(df, draws) / df)[:, None]
    return np.sort(np.abs(z).max(axis=1))


def simultaneous_critical(correlation: np.ndarray, alpha: float = ALPHA, df: float | None = None, **kw) -> float:
    """Two-sided critical value c with P(max_v |T_v| > c) = alpha (`max_abs_draws`): the many-to-one
    (Dunnett-type) simultaneous intervals mean_v +- c se_v hold together with probability 1 - alpha."""
    largest = max_abs_draws(correlation, df, **kw)
    return float(np.quantile(largest, 1 - alpha))


def decide(
    tests: Sequence[Test],
    alpha: float = ALPHA,
    margin: float | None = EQUIVALENCE_MARGIN,
    with_mdd: bool = True,
    correlation: np.ndarray | None = None,
    draws: int = SIMULTANEOUS_DRAWS,
) -> list[Decision]:
    """Verdicts for a family of tests (see the module doc). `margin` None: no equivalence verdicts
    (raw-return tasks, where a margin in normalized units means nothing). `with_mdd=False` leaves the
    minimum detectable difference NaN (it does not enter the verdict; a null study skips its cost).

    correlation: None, Bonferroni (level 1 - alpha / m); else the `(m, m)` null correlation of the
    tests' statistics, and many-to-one max-t intervals: the normal-scale critical value c of
    max |Z| (`simultaneous_critical`) matched to each test's t distribution through its tail, so every
    interval is the test's t interval at level 1 - 2 Phi(-c); the adjusted p-value is P(max |Z| >= z)
    for z the normal quantile of the test's own p-value (single-step max-T). draws: of the max-t law.
    """
    m = len(tests)
    if correlation is None or m <= 1:  # one comparison: either method is its own t interval at 1 - alpha
        level, method, largest = 1 - alpha / max(m, 1), BONFERRONI if correlation is None else MANY_TO_ONE, None
    else:
        largest = max_abs_draws(correlation, draws=draws)
        level, method = 1 - 2 * float(sps.norm.sf(np.quantile(largest, 1 - alpha))), MANY_TO_ONE
    out = []
    for test in tests:
        low, high = test.interval(level)
        if low > 0:
            label = BETTER
        elif high < 0:
            label = WORSE
        elif margin is not None and -margin <= low and high <= margin:
            label = EQUIVALENT
        else:
            label = NO_DIFFERENCE
        p = test.p_value()
        if largest is None:
            adjusted = min(1.0, m * p)
        else:
            z = float(sps.norm.isf(max(p, 1e-300) / 2))
            adjusted = float(1 - np.searchsorted(largest, z) / largest.size)
        mdd = minimum_detectable_difference(test.se, test.df, level) if with_mdd else math.nan
        negligible = margin is not None and -margin <= low and high <= margin
        out.append(Decision(label, low, high, p, adjusted, mdd, m, negligible, method, level))
    return out


def family_level(family_size: int, alpha: float = ALPHA) -> float:
    """The per-comparison confidence level of a family of `family_size` simultaneous intervals."""
    return 1 - alpha / max(family_size, 1)


def fisher_failures(failed_x: int, n_x: int, failed_y: int, n_y: int) -> float:
    """Two-sided p-value of Fisher's exact test that X and Y fail at the same rate."""
    table = [[failed_x, n_x - failed_x], [failed_y, n_y - failed_y]]
    return float(sps.fisher_exact(table, alternative="two-sided").pvalue)


def clopper_pearson_upper(successes: int, trials: int, confidence: float = 0.95) -> float:
    """Upper end of the exact (Clopper-Pearson) two-sided interval of a binomial proportion."""
    return float(sps.binomtest(successes, trials).proportion_ci(confidence).high)
