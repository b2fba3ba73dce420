"""The verdict rule's statistics on hand-computed and scipy-derived values, and its error rate on null data."""

import math

import numpy as np
import pytest
import scipy.stats

from harness.judging import inference


def test_paired_test_equals_scipy_ttest_rel() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    y = np.array([1.5, 1.9, 2.5, 4.6, 4.1])
    test = inference.paired_test(x, y)
    ref = scipy.stats.ttest_rel(x, y)
    assert test.paired and test.df == 4 and test.n_x == test.n_y == 5
    assert test.difference == pytest.approx(0.08)
    assert test.p_value() == pytest.approx(ref.pvalue, rel=1e-10)
    low, high = test.interval(0.95)
    ci = ref.confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_welch_test_equals_scipy_ttest_ind_unequal_variances() -> None:
    x = np.array([3.0, 5.0, 4.0, 8.0])
    y = np.array([1.0, 2.0, 1.5, 2.5, 0.5, 1.0])
    test = inference.welch_test(x, y)
    ref = scipy.stats.ttest_ind(x, y, equal_var=False)
    assert not test.paired
    assert test.difference == pytest.approx(5.0 - 1.4166666666666667)
    assert test.p_value() == pytest.approx(ref.pvalue, rel=1e-10)
    assert test.df == pytest.approx(ref.df, rel=1e-10)


def test_compare_by_seed_pairs_common_seeds_and_falls_back_to_welch() -> None:
    x = {0: 1.0, 1: 2.0, 2: 3.5, 7: 9.0}
    y = {0: 0.5, 1: 1.0, 2: 3.0, 8: -4.0}
    paired = inference.compare_by_seed(x, y)
    assert paired.paired and paired.n_x == 3 and paired.difference == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    unpaired = inference.compare_by_seed({0: 1.0, 1: 2.0, 2: 3.0}, {5: 0.0, 6: 1.0, 7: 0.5})
    assert not unpaired.paired and unpaired.n_x == 3


def test_holm_adjusts_in_step_down_order() -> None:
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> raised to 0.06 (monotone).
    adjusted = inference.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert inference.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_pooled_test_averages_task_differences() -> None:
    a = inference.Test(0.2, 0.1, 4, True, 5, 5, 0.2236)
    b = inference.Test(0.0, 0.2, 9, True, 10, 10, 0.632)
    pooled = inference.pooled_test([a, b])
    assert pooled.difference == pytest.approx(0.1)
    assert pooled.se == pytest.approx(math.sqrt(0.01 + 0.04) / 2)
    # Welch-Satterthwaite: (0.01 + 0.04)^2 / (0.01^2 / 4 + 0.04^2 / 9)
    assert pooled.df == pytest.approx(0.05**2 / (0.0001 / 4 + 0.0016 / 9))


def test_minimum_detectable_difference_has_the_stated_power() -> None:
    # Large df: the normal approximation (z_0.975 + z_0.8) * se.
    assert inference.minimum_detectable_difference(1.0, 1e7, 0.95) == pytest.approx(1.959964 + 0.841621, rel=1e-4)
    # Small df, checked by simulation: a paired t test at n = 5 rejects ~80% of the time at that difference.
    mdd = inference.minimum_detectable_difference(1 / math.sqrt(5), 4, 0.95)
    rng = np.random.default_rng(0)
    d = rng.normal(mdd, 1.0, size=(40_000, 5))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(5))
    rejected = np.mean(np.abs(t) > scipy.stats.t.ppf(0.975, 4))
    assert rejected == pytest.approx(0.8, abs=0.01)


def test_seeds_needed_is_the_smallest_design_reaching_the_target() -> None:
    test = inference.paired_test(np.array([0.1, 0.3, 0.2, 0.0, 0.4]), np.zeros(5))
    n = inference.seeds_needed(test, 0.1, 0.95)
    mdd = lambda k: inference.minimum_detectable_difference(test.spread / math.sqrt(k), k - 1, 0.95)  # noqa: E731
    assert mdd(n) <= 0.1 < mdd(n - 1)


def test_decide_labels_from_simultaneous_intervals() -> None:
    tests = [
        inference.paired_test(np.array([1.0, 1.1, 0.9, 1.05]), np.zeros(4)),  # clearly above 0
        inference.paired_test(np.array([-1.0, -1.1, -0.9, -1.05]), np.zeros(4)),  # clearly below
        inference.paired_test(np.array([0.001, -0.002, 0.0, 0.001]), np.zeros(4)),  # tiny: equivalent
        inference.paired_test(np.array([0.3, -0.4, 0.5, -0.2]), np.zeros(4)),  # wide: undecided
    ]
    decisions = inference.decide(tests, alpha=0.05, margin=0.05)
    assert [d.verdict for d in decisions] == [
        inference.BETTER,
        inference.WORSE,
        inference.EQUIVALENT,
        inference.NO_DIFFERENCE,
    ]
    level = 1 - 0.05 / 4
    assert all(d.family_size == 4 for d in decisions)
    assert (decisions[3].low, decisions[3].high) == pytest.approx(tests[3].interval(level))
    assert decisions[0].p_adjusted == pytest.approx(min(1.0, 4 * tests[0].p_value()))
    assert decisions[3].mdd > abs(tests[3].difference)
    assert [d.negligible for d in decisions] == [False, False, True, False]
    # A real but tiny difference: better, and said to be too small to matter.
    tiny = inference.decide([inference.paired_test(np.array([0.010, 0.011, 0.009, 0.0105]), np.zeros(4))])[0]
    assert tiny.verdict == inference.BETTER and tiny.negligible
    # Without a margin nothing is called equivalent.
    assert inference.decide(tests[2:3], margin=None)[0].verdict == inference.NO_DIFFERENCE


@pytest.mark.parametrize("shared", [0.2, 0.8])
def test_family_wise_error_on_gaussian_null_reports_is_at_most_alpha(shared: float) -> None:
    # 400 null reports shaped like the default one (8 variants vs a reference, 5 seeds), a share `shared` of
    # the variance common to all runs of one seed: no report may hold a spurious better/worse more than 5%
    # of the time (binomial slack at 400 reports: 95% upper bound).
    rng = np.random.default_rng(1)
    spurious = 0
    for _ in range(400):
        seed_effect = rng.normal(0, math.sqrt(shared), size=5)
        reference = seed_effect + rng.normal(0, math.sqrt(1 - shared), size=5)
        tests = [
            inference.paired_test(seed_effect + rng.normal(0, math.sqrt(1 - shared), size=5), reference)
            for _ in range(8)
        ]
        decisions = inference.decide(tests, with_mdd=False)
        spurious += any(d.verdict in (inference.BETTER, inference.WORSE) for d in decisions)
    assert inference.clopper_pearson_upper(spurious, 400) > spurious / 400
    assert spurious / 400 <= 0.05


def test_fisher_failures_equals_scipy() -> None:
    assert inference.fisher_failures(5, 5, 0, 5) == pytest.approx(scipy.stats.fisher_exact([[5, 0], [0, 5]]).pvalue)
    assert inference.fisher_failures(5, 5, 0, 5) == pytest.approx(2 / 252)
    assert inference.fisher_failures(0, 5, 0, 5) == 1.0


def test_many_to_one_critical_value_is_dunnetts_on_unpaired_data() -> None:
    # Unpaired groups with a pooled variance: the max-t law with a shared chi2 is Dunnett's distribution,
    # so the intervals mean_i - mean_0 +- c se_i match scipy.stats.dunnett's.
    rng = np.random.default_rng(7)
    sizes = [6, 5, 7, 6]
    groups = [rng.normal(loc, 1.0, n) for loc, n in zip([0.0, 0.3, -0.5, 1.5], sizes)]
    control, treated = groups[0], groups[1:]
    df = sum(sizes) - len(sizes)
    pooled = sum(((g - g.mean()) ** 2).sum() for g in groups) / df
    se = np.array([np.sqrt(pooled * (1 / g.size + 1 / control.size)) for g in treated])
    # Null correlation through the shared control: 1 / sqrt((1 + n0 / ni)(1 + n0 / nj)).
    ratio = np.array([control.size / g.size for g in treated])
    correlation = 1 / np.sqrt(np.outer(1 + ratio, 1 + ratio))
    np.fill_diagonal(correlation, 1.0)
    critical = inference.simultaneous_critical(correlation, 0.05, df=df, draws=400_000)
    expected = scipy.stats.dunnett(*treated, control=control).confidence_interval(0.95)
    difference = np.array([g.mean() - control.mean() for g in treated])
    np.testing.assert_allclose(difference - critical * se, expected.low, atol=0.01)
    np.testing.assert_allclose(difference + critical * se, expected.high, atol=0.01)


def test_many_to_one_decisions_are_narrower_than_bonferroni_and_exact_for_one_test() -> None:
    rng = np.random.default_rng(3)
    reference = rng.normal(size=8)
    tests = [inference.paired_test(reference + rng.normal(0.5, 0.5, 8), reference) for _ in range(4)]
    correlation = np.full((4, 4), 0.5) + 0.5 * np.eye(4)
    many = inference.decide(tests, correlation=correlation)
    bonferroni = inference.decide(tests)
    for a, b in zip(many, bonferroni):
        assert a.method == inference.MANY_TO_ONE and b.method == inference.BONFERRONI
        assert b.low < a.low < a.high < b.high and a.p_adjusted <= b.p_adjusted
    (one,) = inference.decide(tests[:1], correlation=np.eye(1))
    assert (one.low, one.high) == pytest.approx(tests[0].interval(0.95))
