import numpy as np
import pytest

from variants.actions import affine_to_bounds, env_action
from variants.rewards import transform_reward


def test_actions_map_onto_pendulum_bounds():
    low, high = np.array([-2.0]), np.array([2.0])
    got = affine_to_bounds(np.array([[-1.0], [0.0], [0.5], [1.0]]), low, high)
    np.testing.assert_allclose(got[:, 0], [-2.0, 0.0, 1.0, 2.0])


def test_actions_map_onto_asymmetric_bounds():
    low, high = np.array([0.0, -1.0]), np.array([1.0, 3.0])
    got = affine_to_bounds(np.array([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]]), low, high)
    np.testing.assert_allclose(got, [[0.0, -1.0], [1.0, 3.0], [0.5, 1.0]])


def test_unscaled_stochastic_sends_exploration_unmapped_and_maps_deterministic():
    low, high = np.array([-2.0]), np.array([2.0])
    a = np.array([[0.5]])
    assert env_action(a, low, high, "unscaled-stochastic", deterministic=False)[0, 0] == 0.5
    assert env_action(a, low, high, "unscaled-stochastic", deterministic=True)[0, 0] == 1.0
    assert env_action(a, low, high, "affine", deterministic=False)[0, 0] == 1.0


def test_reward_none_and_scale():
    r = np.array([-1.5, 0.0, 2.0])
    np.testing.assert_allclose(transform_reward(r, "none", "Pendulum-v1"), r)
    np.testing.assert_allclose(transform_reward(r, "scale", "Pendulum-v1", 5.0), r * 5)


def test_bipedal_fall_maps_penalty_then_scales():
    r = np.array([-100.0, 0.25, -0.5])
    np.testing.assert_allclose(transform_reward(r, "bipedal-fall", "BipedalWalker-v3"), [-10.0, 2.5, -5.0])


def test_bipedal_fall_only_maps_the_penalty_and_scales_nothing():
    r = np.array([-100.0, 0.25, -0.5])
    np.testing.assert_allclose(transform_reward(r, "bipedal-fall-only", "BipedalWalker-v3"), [-1.0, 0.25, -0.5])
    np.testing.assert_allclose(transform_reward(r, "bipedal-fall-only", "LunarLanderContinuous-v3"), r)


def test_bipedal_fall_elsewhere_is_plain_times_ten():
    # LunarLander's crash penalty is also -100, but the blog's remap is for BipedalWalker only.
    r = np.array([-100.0, 1.0])
    np.testing.assert_allclose(transform_reward(r, "bipedal-fall", "LunarLanderContinuous-v3"), [-1000.0, 10.0])


def test_unknown_reward_transform():
    with pytest.raises(KeyError):
        transform_reward(np.zeros(1), "clip", "Pendulum-v1")
