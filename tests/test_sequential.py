"""The sequential rules: the boundary against published values, the verdicts a look reads, resuming from a
stored look, and the adastop wrapper against the package's own decisions."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy import stats as sps

from harness.judging import sequential as sq

# Lan-DeMets O'Brien-Fleming-type spending, two-sided alpha = 0.05, equally spaced looks: the critical
# values of gsDesign (sfLDOF, test.type = 2) and of Jennison & Turnbull (2000), table 7.6.
PUBLISHED_OBRIEN_FLEMING = {
    2: [2.9626, 1.9686],
    3: [3.7103, 2.5114, 1.9930],
    4: [4.3326, 2.9631, 2.3590, 2.0141],
    5: [4.8769, 3.3569, 2.6803, 2.2898, 2.0310],
}
# Lan-DeMets Pocock-type spending, the same design (gsDesign sfLDPocock).
PUBLISHED_POCOCK_5 = [2.4380, 2.4268, 2.4101, 2.3966, 2.3859]


@pytest.mark.parametrize("looks", sorted(PUBLISHED_OBRIEN_FLEMING))
def test_obrien_fleming_boundary_matches_published_values(looks: int) -> None:
    fractions = np.arange(1, looks + 1) / looks
    got = sq.boundary(fractions, np.eye(1), 0.05, "obrien-fleming", draws=2_000_000)
    for value, published in zip(got, PUBLISHED_OBRIEN_FLEMING[looks]):
        # Monte Carlo: a look whose crossing probability is below 1e-4 rests on few draws.
        tolerance = 0.02 if published < 3.5 else 0.25
        assert value == pytest.approx(published, abs=tolerance)


def test_pocock_boundary_matches_published_values() -> None:
    got = sq.boundary(np.arange(1, 6) / 5, np.eye(1), 0.05, "pocock", draws=1_000_000)
    np.testing.assert_allclose(got, PUBLISHED_POCOCK_5, atol=0.015)


def test_boundary_of_one_look_is_dunnett_two_sided_critical_value() -> None:
    # One look, m comparisons correlated 0.5 (equal-n many-to-one): Dunnett's two-sided critical value on
    # the normal scale (infinite df), 2.212 for m = 2 and 2.349 for m = 3 (Dunnett 1955 / Bechhofer).
    for m, published in ((2, 2.212), (3, 2.349)):
        correlation = np.full((m, m), 0.5) + 0.5 * np.eye(m)
        assert sq.boundary([1.0], correlation, 0.05, draws=1_000_000)[0] == pytest.approx(published, abs=0.01)


def test_spending_reaches_alpha_at_full_information() -> None:
    for spend in sq.SPENDING.values():
        assert spend(np.array([1.0]), 0.05)[0] == pytest.approx(0.05)
        assert np.all(np.diff(spend(np.linspace(0.1, 1, 10), 0.05)) > 0)


def _scores(rng: np.random.Generator, seeds: int = 30) -> dict[str, dict[int, float]]:
    reference = {s: float(rng.normal()) for s in range(seeds)}
    return {
        "reference": reference,
        "broken": {s: reference[s] - 2.0 + 0.1 * float(rng.normal()) for s in range(seeds)},
        "same": {s: reference[s] + 0.005 * float(rng.normal()) for s in range(seeds)},
        "noisy": {s: float(rng.normal()) for s in range(seeds)},
    }


def _run(scores: dict, design: sq.SequentialDesign) -> list[sq.Look]:
    looks: list[sq.Look] = []
    for j in range(1, design.looks + 1):
        looks.append(sq.decide_look(scores, "reference", j, design, looks[-1] if looks else None))
        if looks[-1].finished:
            break
    return looks


def test_paired_rule_decides_clear_comparisons_at_the_first_look_and_keeps_them() -> None:
    design = sq.SequentialDesign(look_every=5, max_seeds=15)
    looks = _run(_scores(np.random.default_rng(0)), design)
    first = looks[0].decisions
    assert first["broken"].verdict == sq.WORSE and first["broken"].seeds == 5 and first["broken"].look == 1
    assert first["same"].verdict == sq.EQUIVALENT
    assert looks[0].open_variants() == ["noisy"]
    last = looks[-1]
    assert last.index == 3 and last.decisions["broken"] == first["broken"]
    noisy = last.decisions["noisy"]
    assert noisy.seeds == 15 and noisy.look == 3
    if noisy.verdict == sq.OPEN:
        assert noisy.describe(design) == "open at the maximum, 15 seeds"
    assert first["broken"].describe(design) == "worse, decided at look 1, 5 seeds"
    # The interval is the t interval at the studentized boundary's critical value.
    assert noisy.low < noisy.difference < noisy.high


def test_paired_interval_is_mean_plus_minus_critical_t_times_se() -> None:
    reference = {s: float(s % 3) for s in range(4)}
    scores = {"reference": reference, "v": {s: reference[s] + d for s, d in enumerate([0.1, 0.3, 0.2, 0.4])}}
    design = sq.SequentialDesign(look_every=4, max_seeds=4, margin=None)
    look = sq.decide_look(scores, "reference", 1, design)
    d = np.array([0.1, 0.3, 0.2, 0.4])
    half = 3.182446 * d.std(ddof=1) / 2  # t_{0.975, 3}: one look, one comparison is the plain t interval
    decision = look.decisions["v"]
    assert decision.low == pytest.approx(d.mean() - half, abs=2e-3)
    assert decision.high == pytest.approx(d.mean() + half, abs=2e-3)
    assert decision.verdict == sq.BETTER


def test_a_stored_look_resumes_to_the_same_decisions() -> None:
    scores = _scores(np.random.default_rng(3))
    design = sq.SequentialDesign(look_every=5, max_seeds=20)
    straight = _run(scores, design)
    restored = sq.Look.from_dict(json.loads(json.dumps(straight[0].to_dict())))
    assert restored == straight[0]
    resumed = sq.decide_look(scores, "reference", 2, design, restored)
    assert resumed == straight[1]


def test_looks_out_of_order_and_bad_designs_are_refused() -> None:
    scores = _scores(np.random.default_rng(1))
    design = sq.SequentialDesign(look_every=5, max_seeds=10)
    with pytest.raises(ValueError, match="in order"):
        sq.decide_look(scores, "reference", 2, design)
    with pytest.raises(ValueError, match="non-finite"):
        sq.decide_look({**scores, "nan": {0: float("nan")}}, "reference", 1, design)
    for bad in ({"look_every": 1}, {"max_seeds": 3}, {"rule": "nope"}, {"spending": "nope"}, {"alpha": 1.5}):
        with pytest.raises(ValueError):
            sq.SequentialDesign(**bad)
    with pytest.raises(ValueError, match="multiple"):
        sq.SequentialDesign(rule="adastop", look_every=4, max_seeds=10)


def test_adastop_wrapper_agrees_with_the_package() -> None:
    from adastop import MultipleAgentsComparator

    scores = _scores(np.random.default_rng(2), seeds=15)
    design = sq.SequentialDesign(rule="adastop", look_every=5, max_seeds=15)
    looks = _run(scores, design)
    names = ["reference", "broken", "same", "noisy"]
    comparator = MultipleAgentsComparator(
        n=5,
        K=3,
        B=sq.ADASTOP_PERMUTATIONS,
        comparisons=np.array([(1, 0), (2, 0), (3, 0)]),
        alpha=0.05 * sq.ADASTOP_LEVEL_SHARE,
        seed=0,
    )
    for k in range(1, len(looks) + 1):
        comparator.partial_compare({n: np.array([scores[n][s] for s in range(5 * k)]) for n in names}, verbose=False)
    expected = {"larger": sq.BETTER, "smaller": sq.WORSE}
    for i, name in enumerate(names[1:], start=1):
        said = comparator.decisions[str(np.array([i, 0]))]
        assert looks[-1].decisions[name].verdict == expected.get(said, sq.OPEN)
    assert looks[-1].decisions["broken"].verdict == sq.WORSE


def test_adastop_rule_holds_its_level_where_the_package_given_alpha_doubles_it() -> None:
    # One comparison, one look of 5 runs a side: the package enumerates all 252 splits (exact). On 800
    # normal nulls the package at alpha 0.05 rejects about 10% (its two-sided statistic against the
    # signed max's law); the rule, which gives it half, must stay within 5% + 2.5 standard errors.
    from adastop import MultipleAgentsComparator

    rng = np.random.default_rng(4)
    design = sq.SequentialDesign(rule="adastop", look_every=5, max_seeds=5)
    trials, rule_rejects, package_rejects = 800, 0, 0
    for _ in range(trials):
        a, b = rng.normal(size=5), rng.normal(size=5)
        look = sq.decide_look({"reference": dict(enumerate(a)), "v": dict(enumerate(b))}, "reference", 1, design)
        rule_rejects += look.decisions["v"].verdict in (sq.BETTER, sq.WORSE)
        package = MultipleAgentsComparator(
            n=5, K=1, B=sq.ADASTOP_PERMUTATIONS, comparisons=np.array([(1, 0)]), alpha=0.05
        )
        package.partial_compare({"reference": a, "v": b}, verbose=False)
        package_rejects += package.decisions[str(np.array([1, 0]))] in ("larger", "smaller")
    bound = 0.05 + 2.5 * np.sqrt(0.05 * 0.95 / trials)
    assert rule_rejects / trials <= bound < package_rejects / trials


def test_a_replaying_rule_asked_for_its_last_look_decides_as_look_by_look() -> None:
    # The studies ask adastop for its last look alone; it must hold the decisions, and the seeds and
    # look of each, that judging every look in order reaches.
    scores = _scores(np.random.default_rng(2), seeds=15)
    design = sq.SequentialDesign(rule="adastop", look_every=5, max_seeds=15)
    in_order = _run(scores, design)[-1]
    direct = sq.decide_look(scores, "reference", in_order.index, design)
    assert {v: (d.verdict, d.seeds, d.look) for v, d in direct.decisions.items()} == {
        v: (d.verdict, d.seeds, d.look) for v, d in in_order.decisions.items()
    }
    assert direct.decisions["broken"].verdict == sq.WORSE
    with pytest.raises(ValueError, match="in order"):
        sq.decide_look(scores, "reference", 2, sq.SequentialDesign(look_every=5, max_seeds=15))


def _normal_grid(rng: np.random.Generator, seeds: int, shifts: dict[str, float]) -> dict[str, dict[int, float]]:
    """`{name: {seed: score}}`: a seed effect every name shares, plus unit normal noise, plus the name's shift."""
    seed_effect = rng.normal(size=seeds)
    return {n: {s: float(seed_effect[s] + rng.normal() + d) for s in range(seeds)} for n, d in shifts.items()}


def test_paired_rule_holds_its_family_wise_error_on_normal_nulls() -> None:
    # 300 null grids of 3 variants against a reference, looks at 5, 10 and 15 seeds: a spurious better or
    # worse at any look in at most 5% of them (up to Monte Carlo error: 2.5 standard errors, 8.2%).
    rng = np.random.default_rng(11)
    design = sq.SequentialDesign(look_every=5, max_seeds=15, boundary_draws=20_000)
    spurious = 0
    for _ in range(300):
        scores = _normal_grid(rng, 15, {"reference": 0.0, "a": 0.0, "b": 0.0, "c": 0.0})
        final = _run(scores, design)[-1]
        spurious += any(d.verdict in (sq.BETTER, sq.WORSE) for d in final.decisions.values())
    assert spurious / 300 <= 0.082


def test_bonferroni_multiplicity_is_each_comparisons_own_boundary_at_alpha_over_m() -> None:
    scores = _scores(np.random.default_rng(5), seeds=10)
    design = sq.SequentialDesign(look_every=5, max_seeds=10)
    assert design.multiplicity == "bonferroni"
    look = sq.decide_look(scores, "reference", 1, design)
    alone = sq.studentized_boundary([5, 10], np.eye(1), 0.05 / 3, "pocock")
    np.testing.assert_allclose(look.state["critical_t"], alone)
    many = sq.decide_look(
        scores, "reference", 1, sq.SequentialDesign(look_every=5, max_seeds=10, multiplicity="many-to-one")
    )
    assert many.state["critical_t"][1] <= look.state["critical_t"][1] + 0.05  # a joint boundary is never wider


def test_studentized_boundary_of_one_look_is_the_t_quantile() -> None:
    # One look, one comparison: the plain two-sided t critical value, t_{0.975, 4} = 2.776 at 5 seeds.
    got = sq.studentized_boundary([5], np.eye(1), 0.05, draws=400_000)
    assert got[0] == pytest.approx(2.776445, abs=0.03)


def test_studentized_boundary_holds_where_the_known_variance_one_carried_to_t_does_not() -> None:
    # Looks at 5, 10, ..., 30 seeds, alpha 0.05 / 9 (a comparison of the default design): the chance that
    # some look's paired t crosses, on fresh normal paths. The known-variance boundary, each value moved to
    # the t scale by its marginal tail, crosses more often than alpha (about 0.0057-0.0061); the
    # studentized one holds alpha.
    seeds = [5, 10, 15, 20, 25, 30]
    alpha = 0.05 / 9
    paths = np.random.default_rng(7).standard_normal((200_000, 30))
    stats = np.stack([np.abs(paths[:, :n].mean(1)) / (paths[:, :n].std(1, ddof=1) / np.sqrt(n)) for n in seeds], 1)
    studentized = sq.studentized_boundary(seeds, np.eye(1), alpha, draws=200_000)
    normal = sq.boundary(np.array(seeds) / 30, np.eye(1), alpha, draws=1_000_000)
    carried = [sps.t.isf(sps.norm.sf(c), n - 1) for c, n in zip(normal, seeds, strict=True)]
    rate = (stats > studentized).any(axis=1).mean()
    assert rate == pytest.approx(alpha, abs=0.0005)  # 2.5 standard errors of 200,000 paths: 0.0004
    assert (stats > np.array(carried)).any(axis=1).mean() > rate
    assert np.all(studentized >= np.array(carried) - 0.02)


# --- futility ------------------------------------------------------------------------------------


def test_predictive_power_on_hand_computed_values() -> None:
    # Better side: M ~ N(0.2, (0.3 sqrt(10 / (20 * 10)))^2) = N(0.2, 0.067082^2), half-width
    # 2.8 * 0.3 / sqrt(20) = 0.187830: P(M > 0.187830) = Phi(0.18142) = 0.57198 (the lower tail ~4e-9).
    assert sq.predictive_power(0.2, 0.3, 10, 20, 2.8, None) == pytest.approx(0.57198, abs=1e-4)
    # Equivalence side: M ~ N(0, 0.022361^2), half-width 0.062610, margin 0.1: undecided where
    # 0.037390 < |M| < 0.062610, 2 (Phi(2.80000) - Phi(1.67214)) = 0.089394.
    assert sq.predictive_power(0.0, 0.1, 10, 20, 2.8, 0.1) == pytest.approx(1 - 0.089394, abs=1e-4)
    # A half-width below half the margin: every last-look mean reads one verdict or the other.
    assert sq.predictive_power(0.03, 0.01, 5, 20, 3.0, 0.1) == 1.0
    # No spread: decided exactly when the mean seen already lies outside the undecided band.
    assert sq.predictive_power(0.5, 0.0, 5, 20, 3.0, None) == 1.0
    with pytest.raises(ValueError, match="looks ahead"):
        sq.predictive_power(0.1, 0.1, 20, 20, 3.0, None)


def test_futility_stops_a_hopeless_comparison_and_shows_it_no_more_seeds() -> None:
    scores = _scores(np.random.default_rng(0))
    design = sq.SequentialDesign(look_every=5, max_seeds=30, futility=0.1)
    looks = sq.judge_looks(scores, "reference", design)
    # noisy is unpaired noise (differences of sd ~1.4, mean ~0): predictive power 17% and 11% at looks 1
    # and 2, 1% at look 3, where it stops, and the grid with it (broken and same were decided at look 1).
    assert [look.decisions["noisy"].stopped for look in looks] == [False, False, True]
    noisy = looks[-1].decisions["noisy"]
    assert noisy.verdict == sq.OPEN and noisy.seeds == 15 and noisy.predictive_power < 0.1
    assert noisy.describe(design).startswith("open, stopped for futility at look 3, 15 seeds (predictive power")
    assert looks[-1].open_variants() == [] and looks[-1].finished
    assert looks[-1].decisions["broken"].predictive_power is None  # decided: nothing to predict
    without = sq.judge_looks(scores, "reference", dataclasses.replace(design, futility=None))
    assert without[-1].decisions["noisy"].seeds == 30 and not without[-1].decisions["noisy"].stopped
    # A stopped comparison given no seeds since stands as it was at the next look.
    shown = {**scores, "noisy": {s: scores["noisy"][s] for s in range(15)}}
    assert sq.decide_look(shown, "reference", 4, design, looks[-1]).decisions["noisy"] == noisy


def test_futility_is_non_binding_every_claim_with_it_is_made_without_it() -> None:
    # 60 grids of shifted normal comparisons: with futility a comparison reads the verdict it reads
    # without, or stays open; and some were stopped early, so it saved seeds.
    rng = np.random.default_rng(5)
    design = sq.SequentialDesign(look_every=5, max_seeds=20, boundary_draws=20_000)
    stopped = 0
    for _ in range(60):
        scores = _normal_grid(rng, 20, {"reference": 0.0, "a": 0.0, "b": 0.3, "c": 1.0})
        plain = sq.judge_looks(scores, "reference", design)[-1].decisions
        futile = sq.judge_looks(scores, "reference", dataclasses.replace(design, futility=0.2))[-1].decisions
        for v, d in futile.items():
            assert d.verdict in (plain[v].verdict, sq.OPEN)
            assert d.seeds <= plain[v].seeds
            stopped += d.stopped
    assert stopped > 0


def test_futility_thresholds_outside_0_1_and_rules_without_intervals_are_refused() -> None:
    for bad in (0.0, 1.0, -0.2):
        with pytest.raises(ValueError, match="predictive power"):
            sq.SequentialDesign(futility=bad)
    with pytest.raises(ValueError, match="paired rule"):
        sq.SequentialDesign(rule="adastop", look_every=5, max_seeds=10, futility=0.1)


def test_judge_looks_stops_at_the_last_look_the_seeds_cover() -> None:
    # 10 seeds judged by a plan to 20: looks at 5 and 10 only. A third look would judge the same 10 seeds
    # at the critical value of 15, which is smaller on the t scale (more degrees of freedom) and not theirs.
    scores = _scores(np.random.default_rng(0), seeds=10)
    looks = sq.judge_looks(scores, "reference", sq.SequentialDesign(look_every=5, max_seeds=20))
    assert [look.index for look in looks] == [1, 2]
    assert looks[-1].decisions["noisy"].seeds == 10 and looks[-1].decisions["noisy"].look == 2


# --- comparisons with another variant than the reference (an ablation's) --------------------------


def test_a_comparison_with_another_variant_is_judged_on_their_per_seed_differences() -> None:
    rng = np.random.default_rng(0)
    reference = {s: float(rng.normal()) for s in range(10)}
    scores = {
        "reference": reference,
        "variant": {s: reference[s] + 1.0 + 0.01 * float(rng.normal()) for s in range(10)},
        "less": {s: reference[s] + 0.001 * float(rng.normal()) for s in range(10)},
    }
    compared = [("variant", "reference"), ("less", "reference"), ("less", "variant")]
    design = sq.SequentialDesign(look_every=5, max_seeds=10)
    look = sq.decide_look(scores, "reference", 1, design, compared=compared)
    assert list(look.decisions) == ["variant", "less", "less vs variant"]
    assert look.decisions["variant"].verdict == sq.BETTER
    assert look.decisions["less"].verdict == sq.EQUIVALENT
    needed = look.decisions["less vs variant"]
    d = np.array([scores["less"][s] - scores["variant"][s] for s in range(5)])
    assert needed.variant == "less" and needed.verdict == sq.WORSE
    assert needed.difference == pytest.approx(d.mean())
    # the paired rule's interval on those differences, at the look's critical value (Bonferroni over 3)
    half = (needed.high - needed.low) / 2
    critical = half / (d.std(ddof=1) / np.sqrt(5))
    assert critical == pytest.approx(look.state["critical_t"][0])
    with pytest.raises(ValueError, match="no scores of ghost"):
        sq.decide_look(scores, "reference", 1, design, compared=[("less", "ghost")])
    with pytest.raises(ValueError, match="adastop rule compares every variant with the reference only"):
        sq.decide_look(scores, "reference", 1, sq.SequentialDesign(rule="adastop", look_every=5, max_seeds=10),
                       compared=compared)  # fmt: skip


def test_a_decided_variant_gets_seeds_while_a_comparison_with_it_is_open() -> None:
    rng = np.random.default_rng(1)
    reference = {s: float(rng.normal()) for s in range(15)}
    variant = {s: reference[s] + 3.0 + 0.01 * float(rng.normal()) for s in range(15)}  # decided at look 1
    noisy = {s: variant[s] + 2.0 * float(rng.normal()) for s in range(15)}  # open against variant
    scores = {"reference": reference, "variant": variant, "noisy": noisy}
    compared = [("variant", "reference"), ("noisy", "variant")]
    looks = sq.judge_looks(scores, "reference", sq.SequentialDesign(look_every=5, max_seeds=15), compared)
    assert looks[0].decisions["variant"].verdict == sq.BETTER and looks[0].decisions["variant"].seeds == 5
    assert looks[-1].index == 3 and looks[-1].decisions["noisy vs variant"].seeds == 15
    assert sq.seeds_needed_by([("noisy", "variant")]) == ["variant", "noisy"]  # not the reference
