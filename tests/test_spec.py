import dataclasses

import pytest

from variants import CATALOG, REFERENCE, VariantSpec, parse_override, with_overrides
from variants.spec import field_doc, field_names


def test_every_field_is_documented():
    for name in field_names():
        assert len(field_doc(name)) > 10, name


def test_parse_override_types():
    assert parse_override("gamma=0.98") == ("gamma", 0.98)
    assert parse_override("batch_size=64") == ("batch_size", 64)
    assert parse_override("hidden_sizes=64,32") == ("hidden_sizes", (64, 32))
    assert parse_override("target_entropy=none") == ("target_entropy", None)
    assert parse_override("target_entropy=-2") == ("target_entropy", -2.0)
    assert parse_override("log_prob=naive") == ("log_prob", "naive")


@pytest.mark.parametrize(
    "text, message",
    [
        ("gama=1", "unknown field; valid fields: log_prob"),
        ("gamma=abc", "expected float"),
        ("batch_size=1.5", "not an integer"),
        ("gamma", "expected KEY=VALUE"),
    ],
)
def test_parse_override_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_override(text)


def test_invalid_choice_names_the_valid_ones():
    with pytest.raises(ValueError, match="softplus, naive, naive-scaled"):
        with_overrides(REFERENCE, {"log_prob": "exact"})


def test_spec_round_trips_through_dict():
    for entry in CATALOG.values():
        assert VariantSpec.from_dict(entry.spec.to_dict()) == entry.spec


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        REFERENCE.gamma = 0.5  # type: ignore[misc]


def test_single_detail_variants_differ_in_one_field():
    expected = {
        "naive-tanh": {"log_prob"},
        "joint-update": {"update_order"},
        "policy-first": {"update_order"},
        "critic-first": {"update_order"},
        "alpha-loss": {"alpha_loss"},
        "reward-scaled": {"reward"},
    }
    for name, fields in expected.items():
        assert set(CATALOG[name].spec.differences(REFERENCE)) == fields, name
    assert CATALOG["reference"].spec == REFERENCE


def test_source_presets_are_faithful():
    auto = CATALOG["sac-auto"].spec
    assert (auto.lr_actor, auto.lr_critic, auto.lr_alpha, auto.batch_size, auto.learning_starts) == (
        1e-3,
        1e-3,
        1e-3,
        128,
        1000,
    )
    assert (auto.initial_alpha, auto.alpha_loss, auto.log_prob, auto.update_order) == (
        0.2,
        "log_alpha",
        "softplus",
        "sequential",
    )
    assert (auto.log_std_min, auto.log_std_max) == (-20.0, 2.0)
    blog = CATALOG["blog-sac2"].spec
    assert (blog.log_prob, blog.update_order, blog.init, blog.hidden_sizes) == (
        "naive-scaled",
        "policy-first",
        "xavier",
        (256, 256, 256),
    )
    assert (blog.lr_actor, blog.batch_size, blog.initial_alpha, blog.resolved_initial_log_alpha()) == (
        3e-4,
        128,
        0.036,
        0.0,
    )
    assert blog.action_rescale == "unscaled-stochastic"


def test_salt_zero_keeps_the_seed_and_other_salts_draw_new_streams():
    from variants import REFERENCE

    assert REFERENCE.training_seed(7) == 7
    salted = [dataclasses.replace(REFERENCE, salt=k).training_seed(7) for k in (1, 2)]
    assert salted[0] != salted[1] and 7 not in salted
    assert salted[0] == dataclasses.replace(REFERENCE, salt=1).training_seed(7)  # a pure function
    with pytest.raises(ValueError, match="salt"):
        dataclasses.replace(REFERENCE, salt=-1)


def test_salted_learners_start_from_other_weights_and_repeat_themselves():
    import torch
    from helpers import all_params, make_learner, tiny_spec

    base = all_params(make_learner(tiny_spec(), seeds=(3,)))
    one = all_params(make_learner(tiny_spec(salt=1), seeds=(3,)))
    again = all_params(make_learner(tiny_spec(salt=1), seeds=(3,)))
    assert not torch.equal(base[0], one[0])
    assert all(torch.equal(a, b) for a, b in zip(one, again))
