"""The report: files written, robustness to partial and damaged grids, determinism, HTML escaping.

Results folders are synthetic (the schema files written directly by test_stats.write_run).
"""

from __future__ import annotations

import csv
import html
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_stats import write_cell, write_run

from harness import cli, records
from harness.judging import figures, loading, normalization, report, stats
from variants.catalog import REFERENCE

MALICIOUS = "<img src=x onerror=alert(1)>&\"'"  # a legal folder name that is also HTML
FINALS = np.linspace(-400.0, -200.0, 8)


def build_grid(root: Path) -> None:
    """Two envs, a clear loser, a tie, a malicious name, a failed, a diverged and a corrupt run."""
    for env, offset in (("Pendulum-v1", 0.0), ("LunarLanderContinuous-v3", 400.0)):
        write_cell(root, env, "reference", FINALS + offset)
        write_cell(root, env, "naive-tanh", FINALS + offset - 500.0)
    write_cell(root, "Pendulum-v1", MALICIOUS, FINALS[:4])
    write_run(root, "Pendulum-v1", "critic-first", 0, state="failed")
    write_run(root, "Pendulum-v1", "alpha-loss", 0, state="diverged")
    corrupt = write_run(root, "Pendulum-v1", "alpha-loss", 1)
    (corrupt / "status.json").write_text('{"state": "complete", "env_st')  # half-written
    records.run_dir(root, "Pendulum-v1", "alpha-loss", 2).mkdir(parents=True)  # unfinished: no status.json


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, report.ReportSummary]:
    results = tmp_path_factory.mktemp("results")
    build_grid(results)
    out = tmp_path_factory.mktemp("report")
    summary = report.build_report(results, out)
    return results, out, summary


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_report_writes_tables_figures_and_page(built) -> None:
    _, out, summary = built
    for name in (
        "index.html",
        "runs.csv",
        "summary.csv",
        "verdicts.csv",
        "pairing.csv",
        "targets.csv",
        "late_diagnostics.csv",
        "learning_curves_Pendulum-v1.png",
        "learning_curves_LunarLanderContinuous-v3.png",
        "aggregate_final_return.png",
        "aggregate_auc_return.png",
        "performance_profile.png",
        "probability_of_improvement.png",
        "diagnostics_Pendulum-v1.png",
        "run_states.png",
    ):
        assert (out / name).is_file(), name
        assert out / name in summary.files
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary file behind
    page = (out / "index.html").read_text()
    for png in out.glob("*.png"):
        assert f'src="{png.name}"' in page  # every figure is on the page, by relative link
        assert png.read_bytes().startswith(b"\x89PNG")
    assert summary.state_counts == {"complete": 36, "failed": 1, "diverged": 1}
    # The page opens with the verdict table, then the differences, the figures and the protocol.
    positions = [
        page.index(h)
        for h in (
            "<h2>Verdicts",
            "<h2>Differences",
            "<h2>Reaching the target",
            "<h2>At the end of training",
            "<h2>Figures",
            "<h2>Protocol",
        )
    ]
    assert positions == sorted(positions)
    # Each figure section is headed once, and the performance profiles under their own name.
    figures = page[page.index("<h2>Figures") : page.index("<h2>Protocol")]
    headings = [h.split("</h3>")[0] for h in figures.split("<h3>")[1:]]
    assert len(headings) == len(set(headings)), headings
    assert "Performance profiles" in headings


def test_failed_diverged_and_corrupt_runs_are_listed(built) -> None:
    _, out, summary = built
    rows = read_rows(out / "runs.csv")
    assert list(rows[0]) == [*records.RUNS_COLUMNS, "reason", "final_score", "auc_score"]
    states = {(r["variant"], r["seed"]): r for r in rows}
    assert states[("critic-first", "0")]["state"] == "failed"
    assert "failed on purpose" in states[("critic-first", "0")]["reason"]
    assert states[("critic-first", "0")]["final_return"] == ""  # as recorded
    assert float(states[("critic-first", "0")]["final_score"]) == normalization.R_RANDOM["Pendulum-v1"]
    assert states[("alpha-loss", "0")]["state"] == "diverged"
    assert ("alpha-loss", "1") not in states  # corrupt: skipped, not half-read
    assert len(summary.warnings) == 2
    assert any("runs/Pendulum-v1/alpha-loss/seed_1" in w for w in summary.warnings)
    assert any("runs/Pendulum-v1/alpha-loss/seed_2" in w and "status.json" in w for w in summary.warnings)
    page = (out / "index.html").read_text()
    assert "runs/Pendulum-v1/alpha-loss/seed_1" in page and "Warnings" in page
    # The folder without status.json is an unfinished run, listed as such and not among the warnings.
    warnings_box = page[page.index("<h2>Warnings") :]
    warnings_box = warnings_box[: warnings_box.index("</div>")]
    assert "alpha-loss/seed_2" not in warnings_box and "1 run folder(s) could not be read" in warnings_box
    unfinished = page[page.index("<h3>Unfinished runs") :]
    assert "alpha-loss/seed_2" in unfinished[: unfinished.index("</ul>")] and "rerun the grid" in unfinished
    assert "RuntimeError: failed on purpose" in page and "RuntimeError: diverged on purpose" in page
    # Both enter the aggregates at their failure score; the corrupt folder does not.
    summary_rows = read_rows(out / "summary.csv")
    assert {r["variant"] for r in summary_rows} == {"reference", "naive-tanh", MALICIOUS, "critic-first", "alpha-loss"}


def test_summary_and_verdict_files(built) -> None:
    _, out, _ = built
    summary = read_rows(out / "summary.csv")
    assert list(summary[0]) == ["env", "variant", "metric", "estimate", "ci_low", "ci_high", "n_runs"]
    metrics = {r["metric"] for r in summary}
    assert metrics == {
        f"{m}_{a}" for m in ("final_return", "auc_return") for a in ("iqm", "mean", "median", "optimality_gap")
    }
    for row in summary:
        assert float(row["ci_low"]) <= float(row["estimate"]) + 1e-9 <= float(row["ci_high"]) + 2e-9
    verdicts = {(r["env"], r["variant"]): r for r in read_rows(out / "verdicts.csv") if r["metric"] == "final_return"}
    assert verdicts[("Pendulum-v1", "naive-tanh")]["verdict"] == stats.WORSE
    assert verdicts[("all", "naive-tanh")]["verdict"] == stats.WORSE
    assert verdicts[("Pendulum-v1", "critic-first")]["verdict"] == stats.TOO_FEW_RUNS
    page = (out / "index.html").read_text()
    row = verdicts[("Pendulum-v1", "naive-tanh")]
    shown = f"diff {float(row['difference']):+.3g} [{float(row['ci_low']):+.3g}, {float(row['ci_high']):+.3g}]"
    assert shown in page  # the simultaneous interval is shown beside the verdict
    assert "Family:" in page and "Bonferroni" in page


def test_differences_are_generated_from_the_specs(built) -> None:
    _, out, _ = built
    page = (out / "index.html").read_text()
    section = page[page.index("<h2>Differences") : page.index("<h2>Final return")]
    naive = section[section.index("<h3>naive-tanh</h3>") :]
    naive = naive[: naive.index("</table>")]
    assert "<td>log_prob</td>" in naive and html.escape('"naive"') in naive and html.escape('"softplus"') in naive
    assert naive.count("<tr>") == 2  # header + the one field naive-tanh changes
    assert "update_order" in section  # critic-first's one difference


def test_a_spec_field_added_after_a_run_was_recorded_is_read_at_its_default(tmp_path) -> None:
    # Runs recorded before `precision` and `salt` existed ran their defaults (fp32, salt 0): beside runs
    # that record them at those defaults they are neither a difference nor a second reference spec.
    old = {k: v for k, v in REFERENCE.to_dict().items() if k not in ("precision", "salt")}
    for seed in range(3):
        write_run(tmp_path / "res", "Pendulum-v1", "reference", seed, -150.0 - seed, spec=old)
        write_run(tmp_path / "res", "Pendulum-v1", "reference", seed + 3, -150.0 - seed)
        write_run(tmp_path / "res", "Pendulum-v1", "naive-tanh", seed, -160.0 - seed)
    report.build_report(tmp_path / "res", tmp_path / "out", reps=2000)
    page = (tmp_path / "out" / "index.html").read_text()
    section = page[page.index("<h2>Differences") : page.index("<h2>Final return")]
    naive = section[section.index("<h3>naive-tanh</h3>") :]
    naive = naive[: naive.index("</table>")]
    assert naive.count("<tr>") == 2 and "<td>log_prob</td>" in naive  # header + log_prob, not precision or salt
    assert "different specs" not in section


def test_every_name_is_escaped(built) -> None:
    _, out, _ = built
    page = (out / "index.html").read_text()
    assert MALICIOUS not in page
    assert "<img src=x" not in page
    assert html.escape(MALICIOUS, quote=True) in page
    # Figures of that variant exist but under safe file names.
    assert all(
        set(p.name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for p in out.iterdir()
    )


def test_same_results_give_a_byte_identical_summary(built, tmp_path: Path) -> None:
    results, out, _ = built
    np.random.seed(7)  # an outside state of numpy's global generator must not matter
    report.build_report(results, tmp_path / "again")
    assert (tmp_path / "again" / "summary.csv").read_bytes() == (out / "summary.csv").read_bytes()
    assert (tmp_path / "again" / "verdicts.csv").read_bytes() == (out / "verdicts.csv").read_bytes()
    assert (tmp_path / "again" / "runs.csv").read_bytes() == (out / "runs.csv").read_bytes()


def test_one_env_one_seed_without_reference(tmp_path: Path) -> None:
    write_run(tmp_path / "res", "Pendulum-v1", "naive-tanh", 3, -500.0)
    summary = report.build_report(tmp_path / "res", tmp_path / "out")
    page = summary.index_html.read_text()
    assert "no <code>reference</code> run in these results" in page
    assert "<td>log_prob</td>" in page  # diffed against the catalog's reference spec
    verdicts = read_rows(tmp_path / "out" / "verdicts.csv")
    assert {v["verdict"] for v in verdicts} == {stats.NO_REFERENCE}
    iqm = [r for r in read_rows(tmp_path / "out" / "summary.csv") if r["metric"] == "final_return_iqm"]
    assert [(r["env"], r["estimate"], r["n_runs"]) for r in iqm] == [
        ("Pendulum-v1", "-500.0", "1"),
        ("all", repr(float((-500 + 1207.555) / 1057.555)), "1"),
    ]


def test_only_failed_runs_still_report(tmp_path: Path) -> None:
    failed = write_run(tmp_path / "res", "Pendulum-v1", "critic-first", 0, state="failed")
    # Failed at the first update: no evaluation and no diagnostics row, only the headers.
    records.write_csv(failed / "eval.csv", records.EVAL_COLUMNS, [])
    (failed / "diagnostics.csv").write_text((failed / "diagnostics.csv").read_text().splitlines()[0] + "\n")
    summary = report.build_report(tmp_path / "res", tmp_path / "out")
    assert summary.state_counts["failed"] == 1
    # Scored as a random policy: the only number it has.
    iqm = [r for r in read_rows(tmp_path / "out" / "summary.csv") if r["metric"] == "final_return_iqm"]
    assert [(r["env"], float(r["estimate"])) for r in iqm] == [
        ("Pendulum-v1", normalization.R_RANDOM["Pendulum-v1"]),
        ("all", 0.0),
    ]
    assert "critic-first" in summary.index_html.read_text()


def test_a_run_with_nan_and_infinite_evaluations_is_scored_and_reported(tmp_path: Path) -> None:
    # A user env with --target/--random: a -inf score used to reach the performance-profile figure.
    for seed in range(3):
        write_run(tmp_path / "res", "MyEnv-v0", "reference", seed, 50.0 + seed)
        write_run(tmp_path / "res", "MyEnv-v0", "naive-tanh", seed, 40.0 + seed)
    for seed, bad in ((3, float("nan")), (4, float("-inf"))):
        write_run(tmp_path / "res", "MyEnv-v0", "reference", seed, 52.0)
        diverged = write_run(tmp_path / "res", "MyEnv-v0", "naive-tanh", seed, state="diverged")
        records.write_csv(diverged / "eval.csv", records.EVAL_COLUMNS, [(1000, 30.0, 1.0, 3), (2000, bad, 1.0, 3)])
    summary = report.build_report(
        tmp_path / "res", tmp_path / "out", targets={"MyEnv-v0": 100.0}, randoms={"MyEnv-v0": 0.0}
    )
    rows = {int(r["seed"]): r for r in read_rows(tmp_path / "out" / "runs.csv") if r["variant"] == "naive-tanh"}
    for seed in (3, 4):  # floor 0 (R_random): final = min(30, 0); auc = (30 + 3 x 0) / 4
        assert (float(rows[seed]["final_score"]), float(rows[seed]["auc_score"])) == (0.0, 7.5)
    iqm = [r for r in read_rows(tmp_path / "out" / "summary.csv") if r["variant"] == "naive-tanh"]
    assert {r["n_runs"] for r in iqm} == {"5"} and all(np.isfinite(float(r["estimate"])) for r in iqm)
    page = summary.index_html.read_text()
    assert "enters every aggregate and verdict at its failure score" in page and "left out of every" not in page
    assert (tmp_path / "out" / "performance_profile.png").is_file()


def test_report_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.report_command(tmp_path / "missing", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert report.report_command(tmp_path / "empty", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run folders" in err
    assert not (tmp_path / "out").exists()
    write_run(tmp_path / "res", "Pendulum-v1", "reference", 0, -300.0)
    assert report.report_command(tmp_path / "res", tmp_path / "out") == 0
    assert str(tmp_path / "out" / "index.html") in capsys.readouterr().out


def test_report_module_does_not_import_the_learner_or_torch() -> None:
    # The report reads files only: importing it (and stats) must not pull in the learner or torch.
    probe = (
        "import sys, harness.judging.report, harness.judging.stats; "
        "bad = [m for m in ('torch', 'variants.learner') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path(report.__file__).parents[2], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_variants_with_identical_returns_are_grouped():
    rows = []
    for seed in range(3):
        for variant, final in (
            ("joint-update", -140.0 - seed),
            ("policy-first", -140.0 - seed),
            ("reference", -150.0 - seed),
        ):
            rows.append(
                dict(
                    variant=variant,
                    env="Pendulum-v1",
                    seed=seed,
                    state="complete",
                    final_return=final,
                    auc_return=final * 2,
                )
            )
    rows.append(
        dict(
            variant="naive-tanh",
            env="Pendulum-v1",
            seed=0,
            state="failed",
            final_return=float("nan"),
            auc_return=float("nan"),
        )
    )
    assert report.identical_variants(pd.DataFrame(rows)) == [["joint-update", "policy-first"]]
    rows[-3]["final_return"] = -1.0  # policy-first seed 2 now differs: no group left
    assert report.identical_variants(pd.DataFrame(rows)) == []


def test_report_of_a_folder_with_nothing_readable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_run(tmp_path / "res", "Pendulum-v1", "reference", 0, -200.0)
    (folder / "status.json").unlink()  # unfinished
    assert report.report_command(tmp_path / "res", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no readable run" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "index.html").exists()


def test_a_study_in_its_own_folder_is_judged_beside_the_campaigns_reference(tmp_path: Path) -> None:
    # A study run in its own folder pairs with the campaign's reference seeds; --variants keeps the
    # campaign's other variants out of the study's family (and out of its tables).
    campaign, study = tmp_path / "campaign", tmp_path / "study"
    write_cell(campaign, "Pendulum-v1", "reference", FINALS[:4])
    write_cell(campaign, "Pendulum-v1", "naive-tanh", FINALS[:4] - 500.0)
    write_cell(campaign, "Pendulum-v1", "alpha-loss", FINALS[:4])
    write_cell(study, "Pendulum-v1", "ref-wide", FINALS[:4] - 300.0)
    records.run_dir(campaign, "Pendulum-v1", "alpha-loss", 4).mkdir(parents=True)  # unfinished, not the study's
    summary = report.build_report(study, tmp_path / "out", more_results=[campaign], variants=["ref-wide", "naive-tanh"])

    rows = read_rows(tmp_path / "out" / "verdicts.csv")
    judged = {(r["variant"], r["metric"]): r for r in rows if r["env"] == "Pendulum-v1"}
    assert {v for v, _ in judged} == {"ref-wide", "naive-tanh"}
    final = judged[("ref-wide", "final_return")]
    assert final["verdict"] == stats.WORSE and final["n_pairs"] == "4" and final["family_size"] == "2"
    paths = dict(zip(*loading.scan_many([study, campaign]).runs[["variant", "path"]].T.values))
    assert paths["ref-wide"].startswith(study.as_posix()) and paths["reference"].startswith(campaign.as_posix())
    assert summary.n_runs == 12 and "alpha-loss" not in summary.index_html.read_text()
    # The same report from the campaign's folder alone judges its own three variants.
    alone = [
        r
        for r in read_rows(report.build_report(campaign, tmp_path / "alone").out_dir / "verdicts.csv")
        if r["env"] == "Pendulum-v1" and r["metric"] == "final_return"
    ]
    assert sorted(r["variant"] for r in alone) == ["alpha-loss", "naive-tanh"] and alone[0]["family_size"] == "2"


def test_report_judges_against_a_named_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `report --reference V`: one study variant against another; `reference` itself becomes a judged row.
    campaign, study = tmp_path / "campaign", tmp_path / "study"
    write_cell(campaign, "Pendulum-v1", "reference", FINALS[:4])
    write_cell(campaign, "Pendulum-v1", "naive-tanh", FINALS[:4] - 500.0)
    write_cell(study, "Pendulum-v1", "ref-wide", FINALS[:4] - 300.0)
    out = tmp_path / "out"
    assert (
        cli.main(
            [
                "report",
                str(study),
                str(campaign),
                "--variants",
                "ref-wide,reference",
                "--reference",
                "naive-tanh",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = {
        r["variant"]: r
        for r in read_rows(out / "verdicts.csv")
        if r["env"] == "Pendulum-v1" and r["metric"] == "final_return"
    }
    assert set(rows) == {"ref-wide", "reference"} and {r["reference"] for r in rows.values()} == {"naive-tanh"}
    # Every seed of ref-wide is 200 above naive-tanh's, of reference 500 above: the paired differences.
    per_200 = float(
        normalization.normalized_score(200.0, "Pendulum-v1") - normalization.normalized_score(0.0, "Pendulum-v1")
    )
    assert float(rows["ref-wide"]["difference"]) == pytest.approx(per_200)
    assert float(rows["reference"]["difference"]) == pytest.approx(2.5 * per_200)
    assert rows["ref-wide"]["verdict"] == rows["reference"]["verdict"] == stats.BETTER
    assert "Verdicts: each variant vs <code>naive-tanh</code>" in (out / "index.html").read_text()
    assert "| vs naive-tanh, final return | vs naive-tanh, auc_return |" in (out / "findings.md").read_text()
    capsys.readouterr()
    # A named reference with no runs is refused before anything is written.
    assert cli.main(["report", str(study), "--reference", "ref-typo", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run of ref-typo" in err and not (tmp_path / "none").exists()


def test_a_run_recorded_in_two_folders_or_a_variant_with_no_runs_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder in ("a", "b"):
        write_run(tmp_path / folder, "Pendulum-v1", "reference", 0, -200.0)
    assert report.report_command(tmp_path / "a", tmp_path / "out", more_results=[tmp_path / "b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed 0 is recorded twice" in err and "Traceback" not in err
    assert report.report_command(tmp_path / "a", tmp_path / "out", variants=["ref-typo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no run of ref-typo" in err
    assert report.report_command(tmp_path / "a", tmp_path / "out", more_results=[tmp_path / "missing"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_findings_markdown_gives_each_envs_verdicts_as_in_verdicts_csv(built) -> None:
    _, out, summary = built
    assert out / "findings.md" in summary.files
    text = (out / "findings.md").read_text()
    assert text.index("### Pendulum-v1") < text.index("### LunarLanderContinuous-v3")
    pendulum = text[text.index("### Pendulum-v1") : text.index("### LunarLanderContinuous-v3")]
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in pendulum.splitlines() if line.startswith("| ")
    }
    verdict = {(r["env"], r["variant"], r["metric"]): r for r in read_rows(out / "verdicts.csv")}
    v = verdict[("Pendulum-v1", "naive-tanh", "final_return")]
    assert rows["naive-tanh"][4].startswith(
        f"{stats.WORSE}: {float(v['difference']):+.4f} [{float(v['ci_low']):+.4f}, "
    )
    assert rows["naive-tanh"][1] == "8"
    assert rows["critic-first"][1] == "1 (1 failed)" and rows["critic-first"][4] == stats.TOO_FEW_RUNS
    assert rows["reference"][4:] == ["-", "- |"]
    # Reaching the target: Pendulum's curves end at -200 at best (target -150); on LunarLander (target 200)
    # only the last seed's curve, which rises to 200, reaches it, at its last evaluation.
    assert "| reached -150 (first at) |" in pendulum and rows["reference"][3] == "0/8"
    lunar = text[text.index("### LunarLanderContinuous-v3") :]
    assert "| reference | 8 | " in lunar and "| 1/8 (at 4k) |" in lunar
    iqm = [
        r
        for r in read_rows(out / "summary.csv")
        if (r["env"], r["variant"], r["metric"]) == ("Pendulum-v1", "reference", "final_return_iqm")
    ][0]
    assert (
        rows["reference"][2]
        == f"{float(iqm['estimate']):.1f} [{float(iqm['ci_low']):.1f}, {float(iqm['ci_high']):.1f}]"
    )
    assert MALICIOUS.replace("|", "\\|") in pendulum  # a name is one cell


def test_findings_decimals_show_two_significant_digits_of_the_interval() -> None:
    from harness.judging.findings import decimals, verdict_cell

    row = pd.Series(
        {
            "verdict": stats.WORSE,
            "difference": -0.0594,
            "ci_low": -0.1168,
            "ci_high": -0.0021,
            "units": "normalized",
            "mdd": 0.05,
        }
    )
    assert verdict_cell(row) == "worse: -0.059 [-0.117, -0.002]"  # not [-0.12, -0.00]
    assert verdict_cell(row.copy().replace({-0.0021: -0.021})) == "worse: -0.06 [-0.12, -0.02]"
    nodiff = pd.Series(
        {
            "verdict": stats.NO_DIFFERENCE,
            "difference": 0.41,
            "ci_low": -0.24,
            "ci_high": 1.06,
            "units": "normalized",
            "mdd": 0.8206,
        }
    )
    assert verdict_cell(nodiff) == "no detectable difference: +0.41 [-0.24, +1.06]; MDD 0.82"
    assert [decimals(h) for h in (0.32, 0.058, 0.0035, 0.00031, 12.0, 1e-17, 0.0, float("nan"))] == [
        2,
        2,
        3,
        4,
        2,
        4,
        4,
        2,
    ]


def test_a_look_cell_says_whether_more_looks_can_come() -> None:
    from harness.judging import looks
    from harness.judging.findings import look_cell

    open_at_4 = looks.Comparison(
        env="E", variant="v", metric="final_return", verdict="open", difference=0.23, low=-0.06, high=0.52,
        seeds=20, look=4, basis=looks.RULE, note="", against="reference",
    )  # fmt: skip
    assert look_cell(open_at_4) == "open after look 4 (20 seeds): +0.23 [-0.06, +0.52]"
    assert look_cell(open_at_4, looks.END_MAXIMUM) == "open at the maximum (20 seeds): +0.23 [-0.06, +0.52]"
    stopped = looks.Comparison(**{**vars(open_at_4), "seeds": 10, "look": 2, "stopped": True, "predictive_power": 0.03})
    assert look_cell(stopped, looks.END_FUTILITY) == (
        "open, stopped for futility at look 2 (10 seeds; predictive power 3%): +0.23 [-0.06, +0.52]"
    )
    better = looks.Comparison(**{**vars(open_at_4), "verdict": "better", "low": 0.04, "look": 3, "seeds": 15})
    assert look_cell(better, looks.END_DECIDED) == "better at look 3 (15 seeds): +0.23 [+0.04, +0.52]"


def test_reach_text_gives_how_many_runs_reached_the_target_and_when() -> None:
    from harness.judging.findings import reach_text, step_text

    assert [step_text(s) for s in (40000.0, 12500.0, 800.0, 1000.0)] == ["40k", "12.5k", "800", "1k"]
    row = pd.Series(
        {
            "n_runs": 3,
            "n_reached": 2,
            "first_step_median": 60000.0,
            "first_step_min": 40000.0,
            "first_step_max": 80000.0,
        }
    )
    assert reach_text(row) == "2/3 (median 60k; 40k-80k)"
    assert reach_text(row.copy().replace({2: 1})) == "1/3 (at 60k)"
    assert reach_text(row.copy().replace({2: 0})) == "0/3"
    assert reach_text(None) == "-"


def test_a_report_with_no_comparison_yet_says_so(tmp_path: Path) -> None:
    # One seed a side, as in the first hour of a campaign: no verdict, and the page says why.
    write_cell(tmp_path / "results", "Pendulum-v1", "reference", FINALS[:1])
    write_cell(tmp_path / "results", "Pendulum-v1", "naive-tanh", FINALS[:1])
    report.build_report(tmp_path / "results", tmp_path / "out")
    page = (tmp_path / "out" / "index.html").read_text()
    assert (
        f"none yet: no variant has the {stats.MIN_RUNS_FOR_VERDICT} runs" in page and "the 0 final-return" not in page
    )
    findings = (tmp_path / "out" / "findings.md").read_text()
    assert "No verdict yet" in findings and "family of 0" not in findings
    assert (
        f"| naive-tanh | 1 | {FINALS[0]:.1f} [{FINALS[0]:.1f}, {FINALS[0]:.1f}] | 0/1 | {stats.TOO_FEW_RUNS} | "
        f"{stats.TOO_FEW_RUNS} |"
    ) in findings


def test_aggregate_rows_carry_their_run_counts() -> None:
    pooled = pd.DataFrame(
        {
            "variant": ["reference", "reference", "ref-scale-10", "ref-scale-10"],
            "metric": ["final_return_iqm", "final_return_mean"] * 2,
            "n_runs": [5, 5, 2, 2],
        }
    )
    assert figures.aggregate_row_labels(pooled) == {
        "reference": "reference (n 5)",
        "ref-scale-10": "ref-scale-10 (n 2)",
    }


@pytest.mark.parametrize("n_variants", [1, 2, 5, 10])
def test_aggregate_axis_label_clears_the_tick_labels(n_variants: int) -> None:
    names = [f"variant-{i}" for i in range(n_variants)]
    summary = pd.DataFrame(
        [
            {
                "env": stats.ALL_ENVS,
                "variant": name,
                "metric": f"final_return_{aggregate}",
                "n_runs": 5,
                "estimate": 0.5,
                "ci_low": 0.25,
                "ci_high": 0.75,
            }
            for name in names
            for aggregate in stats.AGGREGATES
        ]
    )
    fig = figures.aggregate_intervals_figure(summary, "final_return", {name: "black" for name in names})
    assert fig is not None
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    label = next(t for t in fig.texts if t.get_text().startswith("normalized final_return"))
    label_top = label.get_window_extent(renderer).y1
    tick_bottom = min(t.get_window_extent(renderer).y0 for ax in fig.axes for t in ax.get_xticklabels() if t.get_text())
    figures.plt.close(fig)
    assert label_top < tick_bottom


# Builds the report in a fresh interpreter, then prints which of the training side's libraries it imported.
_REPORT_PROBE = """
import sys
from harness.cli import main
code = main(["report", sys.argv[1], "--out", sys.argv[2]])
print(f"exit={code} loaded={[m for m in ('torch', 'stable_baselines3') if m in sys.modules]}")
"""


def test_report_of_sb3_sac_records_imports_neither_torch_nor_stable_baselines3(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_cell(results, "Pendulum-v1", "reference", FINALS[:3])
    write_cell(results, "Pendulum-v1", "sb3-sac", FINALS[:3])
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT_PROBE, str(results), str(tmp_path / "report")],
        cwd=Path(report.__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.strip().splitlines()[-1] == "exit=0 loaded=[]", proc.stdout + proc.stderr
    assert (tmp_path / "report" / "index.html").exists()


def test_an_open_cell_says_how_many_seeds_would_detect_the_difference_it_saw() -> None:
    from harness.judging.report import _seeds_to_decide_text

    def cell(difference: float, seeds: float) -> pd.Series:
        return pd.Series({"difference": difference, "seeds_for_difference": seeds})

    assert _seeds_to_decide_text(cell(0.21, 18.0)) == "; 18 seeds would detect the difference seen"
    assert _seeds_to_decide_text(cell(-0.01, float("nan"))) == (
        "; more than 1,000 seeds would be needed to detect the difference seen"
    )
    assert _seeds_to_decide_text(cell(0.0, float("nan"))) == ""  # nothing seen, nothing to detect
