import pytest
import torch

from harness.running.bench import (
    _block_lines,
    _orientations,
    _update_lines,
    alternating_rounds,
    fastest_ways,
    gemm_flops,
    run_bench,
    update_gemms,
)


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
    lines = run_bench("cpu", repeats=2, e2e_steps=1010, members=(1, 2), rounds=2)
    text = "\n".join(lines)
    for needle in (
        "cpu: ",
        "native bf16 (avx512_bf16 or amx_bf16): ",
        "full update, S=1, fp32:",
        "full update, S=1, bf16:",
        "GFLOP",
        "floor (those GEMMs alone), fp32:",
        "floor (those GEMMs alone), bf16:",
        "update / floor, bf16:",
        "bf16 update / fp32 update:",
        "bf16 update / fp32 floor:",
        "bf16 bound / fp32 update:",
        "in blocks of 2 consecutive updates",
        "bf16 / fp32 in blocks:",
        "16x16 networks:",
        "S=2",
        "sacbench fp32",
        "sacbench bf16",
        "Stable-Baselines3",
    ):
        assert needle in text
    # every round of the S=1 table is printed: its number, 2 updates and 2 floors, all positive
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["round"])
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    assert [r[0] for r in rows] == ["1", "2", "median"] and all(len(r) == 5 for r in rows)
    assert all(float(v) > 0 for r in rows for v in r[1:])


def test_alternating_rounds_take_turns_call_by_call_and_keep_each_rounds_median():
    calls, figures = [], iter([1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 8.0, 4.0, 9.0, 10.0, 12.0, 11.0])

    def case(name):
        return lambda: calls.append(name) or next(figures)

    rounds = alternating_rounds([case("a"), case("b")], rounds=2, calls=3)
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a"]
    # round 1: a got 1, 6, 3 and b 5, 2, 7; round 2: a got 4, 9, 11 and b 8, 10, 12
    assert rounds == [[3.0, 5.0], [9.0, 10.0]]


def test_bf16_floor_picks_each_product_in_bf16_or_fp32():
    gemms = [(1, 64, 64, 64), (2, 64, 64, 1)]
    ways = fastest_ways(gemms, torch.device("cpu"), trials=2, dtypes=(torch.bfloat16, torch.float32))
    outputs = [way() for way in ways]
    assert [tuple(o.shape) for o in outputs] == [(1, 64, 64), (2, 64, 1)]
    assert all(o.dtype in (torch.bfloat16, torch.float32) for o in outputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gemm", [(2, 256, 256, 1), (1, 256, 256, 2), (2, 256, 1, 256), (1, 3, 256, 256)])
def test_every_way_the_floor_times_computes_the_same_product(gemm, dtype):
    ways = _orientations(*gemm, torch.device("cpu"), dtype)
    b, m, k, n = gemm
    assert len(ways) == (3 if k == 1 else 2)
    first = ways[0]().clone()
    assert first.shape == (b, m, n) and first.dtype == dtype
    for way in ways[1:]:
        # bf16 outputs are rounded to 8 significant bits, whichever kernel summed them
        torch.testing.assert_close(way(), first, rtol=1e-5 if dtype == torch.float32 else 2**-7, atol=1e-4)


def test_the_bound_is_the_fp32_overhead_plus_the_bf16_floor_round_by_round():
    # rounds: fp32 update, bf16 update, fp32 floor, bf16 floor (ms)
    rounds = [[12.0, 9.0, 9.0, 5.0], [10.0, 8.0, 8.0, 4.0]]
    lines = _update_lines(["fp32", "bf16"], rounds, flops=10**9, gemm_count=10)
    bound = next(line for line in lines if line.startswith("bf16 bound / fp32 update:"))
    # (12 - 9 + 5) / 12 = 0.667 and (10 - 8 + 4) / 10 = 0.6: median 0.63
    assert "0.63 x" in bound and "per round 0.67, 0.60)" in bound


def test_the_sb3_end_to_end_leaves_no_temp_folder(tmp_path, monkeypatch):
    pytest.importorskip("stable_baselines3")
    import tempfile

    from harness.running.bench import sb3_steps_per_second
    from variants.spec import VariantSpec

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where SB3's default logger would make SB3-<time>/
    spec = VariantSpec(learning_starts=50, batch_size=16, hidden_sizes=(8, 8))
    assert sb3_steps_per_second(spec, 120, "cpu") > 0
    assert list(tmp_path.glob("SB3-*")) == []


def test_the_in_blocks_table_prints_every_round_and_the_ratio_round_by_round():
    lines = _block_lines(["fp32", "bf16"], [[10.0, 7.0], [20.0, 16.0]], block=20)
    assert lines[0].startswith("S=1, ms per update in blocks of 20 consecutive updates")
    assert [line.split() for line in lines[2:5]] == [
        ["1", "10.00", "7.00"],
        ["2", "20.00", "16.00"],
        ["median", "15.00", "11.50"],
    ]
    assert lines[5].split() == ["bf16", "/", "fp32", "in", "blocks:", "0.75", "x", "(per", "round", "0.70,", "0.80)"]
