import pytest
import torch

from harness.bench import _orientations, gemm_flops, run_bench, update_gemms


def test_update_gemm_shapes_and_flops_by_hand():
    gemms = update_gemms(obs_dim=3, act_dim=1, hidden=(4,), batch=2, members=1)
    # actor 3->4->2, critic 4->4->1 (twins stacked: batch count 2)
    assert gemms[:4] == [(1, 2, 3, 4), (1, 2, 4, 2), (2, 2, 4, 4), (2, 2, 4, 1)]
    assert len(gemms) == 2 + 2 + (2 + 2 + 1) + (2 + 2 + 2) + (2 + 1)
    assert gemm_flops([(2, 3, 4, 5)]) == 2 * 2 * 3 * 4 * 5


def test_reference_update_is_about_half_a_gflop_on_pendulum():
    flops = gemm_flops(update_gemms(3, 1, (256, 256), 256, 1))
    assert 0.5e9 < flops < 0.6e9
    assert gemm_flops(update_gemms(3, 1, (256, 256), 256, 4)) == 4 * flops


def test_bench_prints_every_figure():
    lines = run_bench("cpu", repeats=2, e2e_steps=1010, members=(1, 2))
    text = "\n".join(lines)
    for needle in ("full update, S=1:", "GFLOP", "floor (those GEMMs alone):", "update / floor:", "16x16 networks:", "S=2",
                   "sacbench:", "Stable-Baselines3:"):
        assert needle in text


@pytest.mark.parametrize("gemm", [(2, 256, 256, 1), (1, 256, 256, 2), (2, 256, 1, 256), (1, 3, 256, 256)])
def test_every_way_the_floor_times_computes_the_same_product(gemm):
    ways = _orientations(*gemm, torch.device("cpu"))
    b, m, k, n = gemm
    assert len(ways) == (3 if k == 1 else 2)
    first = ways[0]().clone()
    assert first.shape == (b, m, n)
    for way in ways[1:]:
        torch.testing.assert_close(way(), first, rtol=1e-5, atol=1e-4)
