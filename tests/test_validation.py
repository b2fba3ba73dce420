"""Bad input is refused at parse time with one line and exit 2: non-finite numbers, negative widths,
out-of-range rates, a failed baseline, an env module that exits at import; large inputs stay fast."""

from __future__ import annotations

import textwrap

import pytest

from harness.cli import main
from variants import REFERENCE, parse_override, with_overrides
from variants.spec import parse_widths
from variants.userfile import load_variants_file


def _run(tmp_path, *extra: str) -> list[str]:
    out = ["run", "--variants", "reference", "--envs", "Pendulum-v1", "--seeds", "1", "--steps", "300"]
    return [*out, "--set", "learning_starts=50", "--out", str(tmp_path / "r"), "--dry-run", *extra]


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.out + captured.err
    return lines[0]


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("lr_actor=nan", "not a finite number"),
        ("lr_critic=inf", "not a finite number"),
        ("target_entropy=inf", "not a finite number"),
        ("reward_scale=-inf", "not a finite number"),
        ("hidden_sizes=-64,-64", "positive whole numbers"),
        ("hidden_sizes=64x-8", "positive whole numbers"),
        ("hidden_sizes=64,,64", "positive whole numbers"),
        ("lr_alpha=-0.001", "lr_alpha=-0.001: must be positive"),
        ("lr_decay_period=-5", "lr_decay_period=-5: must be >= 0"),
    ],
)
def test_bad_spec_values_exit_2_with_one_line_also_in_a_dry_run(tmp_path, capsys, assignment, message):
    assert main(_run(tmp_path, "--set", assignment)) == 2
    assert message in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_widths_take_commas_or_x_and_specs_refuse_non_finite_values():
    assert parse_widths("256,256") == parse_widths("256x256") == parse_widths(" 256, 256 ") == (256, 256)
    assert parse_override("hidden_sizes=64x32x16") == ("hidden_sizes", (64, 32, 16))
    for field in ("gamma", "tau", "lr_actor", "initial_alpha", "log_std_max", "target_entropy"):
        with pytest.raises(ValueError):
            with_overrides(REFERENCE, {field: float("nan")})
    assert with_overrides(REFERENCE, {"lr_alpha": 0.0, "lr_decay_period": 0}).lr_alpha == 0.0


def test_a_variants_file_with_a_non_finite_value_is_refused(tmp_path):
    path = tmp_path / "v.toml"
    path.write_text('[[variant]]\nname = "x"\ndescription = "d"\ntarget_entropy = nan\n')
    with pytest.raises(ValueError, match="not a finite number"):
        load_variants_file(path)


def test_negative_seed_offset_and_a_failed_baseline_are_refused(tmp_path, capsys):
    baseline = tmp_path / "baseline"
    check = ["check", "--baseline", str(baseline), "--out", str(tmp_path / "new"), "--update-baseline"]
    assert main([*check, "--seed-offset", "-5"]) == 2
    assert "--seed-offset must be >= 0" in _one_line_error(capsys)
    tiny = ["--set", "learning_starts=10", "--set", "batch_size=8", "--set", "hidden_sizes=8,8"]
    # critic-first fails at its first update (PyTorch's in-place error): its runs are recorded failed.
    code = main([*check, "--variants", "critic-first", "--seeds", "1", "--steps", "40", "--workers", "1", *tiny])
    assert code == 2
    assert "critic-first seed_0: failed" in capsys.readouterr().err
    assert not baseline.exists()


def test_an_env_module_that_exits_at_import_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    (tmp_path / "exits_at_import.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["run", "--variants", "reference", "--envs", "exits_at_import:Env", "--steps", "300", "--dry-run"])
    assert code == 2
    assert "exits_at_import" in _one_line_error(capsys)


def test_loading_a_variants_file_of_10000_entries(tmp_path, benchmark):
    """Figures: `python -m pytest tests/test_validation.py -k 10000 --benchmark-enable`."""
    entry = textwrap.dedent(
        """
        [[variant]]
        name = "v{i}"
        description = "batch {batch}"
        batch_size = {batch}
        hidden_sizes = [64, 64]
        """
    )
    path = tmp_path / "many.toml"
    path.write_text("".join(entry.format(i=i, batch=64 + i % 100) for i in range(10_000)))
    loaded = benchmark.pedantic(load_variants_file, args=(path,), rounds=1, iterations=1)
    assert len(loaded) == 10_000
    assert loaded["v123"].spec.batch_size == 64 + 23 and loaded["v123"].spec.hidden_sizes == (64, 64)
