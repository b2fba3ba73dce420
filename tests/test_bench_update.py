"""Update speed and its GEMM floor, as pytest-benchmark benchmarks (run for figures with:
`python -m pytest tests/test_bench_update.py --benchmark-enable -p no:xdist`). In the normal test run
benchmarks are disabled and each case runs once, as a test that the timed code works."""

import dataclasses

import numpy as np
import pytest
import torch

from harness.running.bench import fastest_ways, update_gemms
from variants import CATALOG
from variants.buffer import ReplayBuffer
from variants.learner import SACLearner


@pytest.mark.parametrize("members, hidden", [(1, (256, 256)), (4, (256, 256)), (1, (16, 16))])
def test_update_speed_reference_pendulum(benchmark, members, hidden):
    # 16x16 networks: the part of an update's cost that does not scale with width
    spec = dataclasses.replace(CATALOG["reference"].spec, hidden_sizes=hidden)  # batch 256
    learner = SACLearner(spec, 3, 1, np.array([2.0]), list(range(members)))
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(members, 2000, 3, 1)
    for _ in range(2000):
        buf.add(
            rng.normal(size=(members, 3)),
            rng.uniform(-1, 1, (members, 1)),
            rng.normal(size=members),
            rng.normal(size=(members, 3)),
            np.zeros(members),
        )
    before = learner.actor[0].detach().clone()
    benchmark(lambda: learner.update(buf.sample(spec.batch_size, learner.generators)))
    assert learner.updates >= 1 and not torch.equal(before, learner.actor[0])


def test_floor_gemms_speed(benchmark):
    """The update's products back to back, each its fastest way: what the bench calls the floor."""
    gemms = update_gemms(3, 1, (256, 256), 256, 1)
    ways = fastest_ways(gemms, torch.device("cpu"), trials=3)
    outputs = benchmark(lambda: [way() for way in ways])
    # every product is computed in full, whichever orientation was picked
    assert [tuple(o.shape) for o in outputs] == [(b, m, n) for b, m, _, n in gemms]
