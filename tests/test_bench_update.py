"""Update speed, as pytest-benchmark benchmarks (run for figures with:
`python -m pytest tests/test_bench_update.py --benchmark-enable -p no:xdist`). In the normal test run
benchmarks are disabled and each case runs once, as a test that the timed code works."""

import numpy as np
import pytest
import torch

from variants import CATALOG
from variants.buffer import ReplayBuffer
from variants.learner import SACLearner


@pytest.mark.parametrize("members", [1, 4])
def test_update_speed_reference_pendulum(benchmark, members):
    spec = CATALOG["reference"].spec  # 256x256, batch 256
    learner = SACLearner(spec, 3, 1, np.array([2.0]), list(range(members)))
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(members, 2000, 3, 1)
    for _ in range(2000):
        buf.add(rng.normal(size=(members, 3)), rng.uniform(-1, 1, (members, 1)), rng.normal(size=members),
                rng.normal(size=(members, 3)), np.zeros(members))
    before = learner.actor[0].detach().clone()
    benchmark(lambda: learner.update(buf.sample(spec.batch_size, learner.generators)))
    assert learner.updates >= 1 and not torch.equal(before, learner.actor[0])
