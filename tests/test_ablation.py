"""Ablation: a variant's differences from the reference (grouped), the ablated specs and their names,
the files an ablation grid writes, and the report's attribution table."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_stats import write_run

from harness import ablation
from harness.judging import inference, report
from variants.ablation import AblationError, ablation_plan, difference_groups
from variants.catalog import CATALOG, REFERENCE
from variants.spec import COUPLED_FIELDS, field_names
from variants.userfile import load_variants_file

BLOG = CATALOG["blog-sac2"].spec

# blog-sac2 against the reference, read off the catalog entry by hand (fields in the spec's order).
BLOG_GROUPS = [
    (("log_prob",), ("softplus",), ("naive-scaled",)),
    (("update_order",), ("sequential",), ("policy-first",)),
    (("action_rescale",), ("affine",), ("unscaled-stochastic",)),
    (("init",), ("torch-default",), ("xavier",)),
    (("batch_size",), (256,), (128,)),
    (("hidden_sizes",), ((256, 256),), ((256, 256, 256),)),
    (("initial_alpha", "initial_log_alpha"), (1.0, None), (0.036, 0.0)),
]


def test_blog_sac2s_differences_are_seven_with_the_two_alpha_fields_as_one():
    groups = difference_groups(REFERENCE, BLOG)
    assert [(g.fields, g.reference_values, g.variant_values) for g in groups] == BLOG_GROUPS
    assert groups[-1].key == "initial_alpha+initial_log_alpha"
    assert groups[-1].label() == "initial_alpha=0.036, initial_log_alpha=0"


def test_every_coupled_field_is_a_spec_field_in_one_group_only():
    coupled = [f for group in COUPLED_FIELDS for f in group]
    assert set(coupled) <= set(field_names()) and len(coupled) == len(set(coupled))


def test_blog_sac2s_ablation_adds_or_removes_exactly_one_difference_each():
    plan = ablation_plan("reference", REFERENCE, "blog-sac2", BLOG)
    assert [(p.role, p.difference.fields) for p in plan] == [
        (role, fields) for fields, _, _ in BLOG_GROUPS for role in ("added", "removed")
    ]
    for item in plan:
        fields = set(item.difference.fields)
        if item.role == "added":
            assert set(item.spec.differences(REFERENCE)) == fields
        else:
            assert set(item.spec.differences(BLOG)) == fields
            assert set(item.spec.differences(REFERENCE)) == set(BLOG.differences(REFERENCE)) - fields
    names = {(p.role, p.difference.key): p.name for p in plan}
    assert names[("added", "init")] == "ref-init-xavier"
    assert names[("added", "hidden_sizes")] == "ref-hidden_sizes-256x256x256"
    assert names[("removed", "initial_alpha+initial_log_alpha")] == "blog-sac2-no-initial_alpha-initial_log_alpha"
    assert len(set(names.values())) == 14


def test_a_users_variant_coupled_fields_move_together_and_equal_specs_share_a_name(tmp_path: Path):
    path = tmp_path / "mine.toml"
    path.write_text(
        '[[variant]]\nname = "mine"\ndescription = "scaled rewards, small batch"\nbase = "sac-auto"\n'
        'reward = "scale"\nreward_scale = 5.0\n'
    )
    mine = load_variants_file(path)["mine"].spec
    groups = difference_groups(REFERENCE, mine)
    # sac-auto's three learning rates each move alone; reward with its scale as one; learning_starts
    # (1000 in both) is no difference.
    assert [(g.fields, g.variant_values) for g in groups] == [
        (("reward", "reward_scale"), ("scale", 5.0)),
        (("lr_actor",), (1e-3,)),
        (("lr_critic",), (1e-3,)),
        (("lr_alpha",), (1e-3,)),
        (("batch_size",), (128,)),
        (("initial_alpha",), (0.2,)),
    ]
    two = dataclasses.replace(REFERENCE, init="xavier", batch_size=128)
    plan = ablation_plan("reference", REFERENCE, "two", two)
    by_role = {(p.role, p.difference.key): p.name for p in plan}
    # reference + init is two - batch_size: one spec, one name, one set of runs.
    assert by_role[("added", "init")] == by_role[("removed", "batch_size")] == "ref-init-xavier"
    assert by_role[("added", "batch_size")] == by_role[("removed", "init")] == "ref-batch_size-128"


def test_no_difference_or_an_invalid_ablated_spec_is_refused():
    with pytest.raises(AblationError, match="same spec"):
        ablation_plan("reference", REFERENCE, "copy", REFERENCE)
    one_layer = dataclasses.replace(REFERENCE, hidden_sizes=(64,))
    bf16 = dataclasses.replace(REFERENCE, hidden_sizes=(64, 64), precision="bf16")
    with pytest.raises(AblationError, match="precision=bf16 needs at least two hidden layers"):
        ablation_plan("one", one_layer, "bf16", bf16)


def test_the_written_variants_file_holds_the_plans_specs_and_reuses_recorded_names(tmp_path: Path):
    out = tmp_path / "results"
    xavier = dataclasses.replace(REFERENCE, init="xavier")
    write_run(out, "Pendulum-v1", "ref-xavier", 0, spec=xavier.to_dict())  # a study begun by hand
    ends = {"reference": REFERENCE, "blog-sac2": BLOG}
    names, path = ablation.prepare_grid(out, ends, "python -m harness ablate blog-sac2")
    assert names[:2] == ["reference", "blog-sac2"] and "ref-xavier" in names and "ref-init-xavier" not in names
    written = load_variants_file(path)
    manifest = ablation.read_manifest(out)
    assert (manifest.reference, manifest.variant) == (REFERENCE, BLOG)
    for item in manifest.plan():
        name = manifest.names[(item.role, item.difference.key)]
        assert written[name].spec == item.spec and written[name].implementation == "native"
    assert sorted(written) == sorted(names[2:])
    # Another variant's ablation in the same folder is refused: one manifest per results folder.
    with pytest.raises(ablation.ManifestError, match="needs its own --out"):
        ablation.prepare_grid(out, {"reference": REFERENCE, "sac-auto": CATALOG["sac-auto"].spec}, "again")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_report_of_an_ablation_grid_attributes_the_gain(tmp_path: Path):
    # `two` is the reference with Xavier init and batch 128; batch 128 alone lifts Pendulum's final
    # return by 300, init changes nothing. Expected: batch moves the score on its own (better) and the
    # variant needs it (removing it: worse); init is equivalent both ways.
    results = tmp_path / "results"
    two = dataclasses.replace(REFERENCE, init="xavier", batch_size=128)
    ablation.prepare_grid(results, {"reference": REFERENCE, "two": two}, "test")
    base = np.linspace(-900.0, -500.0, 8)
    noise = np.array([1.0, -2.0, 3.0, -1.0, 2.0, -3.0, 1.5, -0.5])
    cells = {
        "reference": (REFERENCE, base),
        "two": (two, base + 300.0 + noise),
        "ref-init-xavier": (dataclasses.replace(REFERENCE, init="xavier"), base + noise),
        "ref-batch_size-128": (dataclasses.replace(REFERENCE, batch_size=128), base + 300.0 - noise),
    }
    for name, (spec, finals) in cells.items():
        for seed, final in enumerate(finals):
            write_run(results, "Pendulum-v1", name, seed, float(final), spec=spec.to_dict())
    out = tmp_path / "report"
    summary = report.build_report(results, out)
    rows = {(r["difference"], r["role"]): r for r in read_rows(out / "attribution.csv")}
    assert set(rows) == {(d, r) for d in ("init", "batch_size") for r in ("added", "removed")}
    assert rows[("batch_size", "added")]["verdict"] == inference.BETTER
    assert rows[("batch_size", "added")]["against"] == "reference"
    assert rows[("batch_size", "removed")]["verdict"] == inference.WORSE
    assert rows[("batch_size", "removed")]["variant"] == "ref-init-xavier"
    assert rows[("batch_size", "removed")]["reading"].startswith("needed")
    assert rows[("init", "added")]["verdict"] == rows[("init", "removed")]["verdict"] == inference.EQUIVALENT
    assert {r["n_pairs"] for r in rows.values()} == {"8"} and {r["family_size"] for r in rows.values()} == {"4"}
    # Hand check of one estimate: the paired mean of ref-batch_size-128 - two is -2 * the mean noise,
    # in units of Pendulum's normalization (random -1207.555, target -150).
    removed_init = rows[("init", "removed")]
    assert float(removed_init["estimate"]) == pytest.approx(-2 * noise.mean() / (-150.0 - -1207.555), abs=1e-9)
    page = summary.index_html.read_text()
    assert "Attribution: which of <code>two</code>" in page and "needed: removing it lowers the score" in page
    markdown = (out / "attribution.md").read_text()
    # Decimals follow the interval's half-width: init alone, paired differences noise / 1057.555 (mean
    # 0.00012, half-width 0.002) show three; batch removed, every difference -300 / 1057.555 = -0.28367
    # (zero width) shows four.
    assert "| `init=xavier` | on its own | equivalent | +0.000 [-0.002, +0.002] |" in markdown
    assert "| `batch_size=128` | needed | worse | -0.2837 [-0.2837, -0.2837] |" in markdown


EXAMPLE = Path(__file__).parents[1] / "examples" / "blog_sac2_ablation.toml"
COMMITTED = Path(__file__).parents[1] / "results" / "lunarlander-100k-ablation"
CAMPAIGN = Path(__file__).parents[1] / "results" / "lunarlander-100k"


def test_the_blog_sac2_example_is_what_ablate_writes_for_the_committed_study(tmp_path: Path):
    # The committed study's three variants (one field of blog-sac2 each, trained by hand before the
    # command existed) keep their names, so their runs are reused; the other eleven are new.
    command = EXAMPLE.read_text().splitlines()[1].lstrip("# ")
    assert command.startswith("python -m harness ablate blog-sac2 ")
    ends = {"reference": REFERENCE, "blog-sac2": BLOG}
    _, path = ablation.prepare_grid(COMMITTED, ends, command, files_dir=tmp_path)
    assert path.read_text() == EXAMPLE.read_text()
    written = load_variants_file(EXAMPLE)
    assert written["ref-3-layers"].spec.differences(REFERENCE) == {"hidden_sizes": ([256, 256, 256], [256, 256])}
    assert written["ref-xavier"].spec.differences(REFERENCE) == {"init": ("xavier", "torch-default")}
    assert written["ref-batch-128"].spec.differences(REFERENCE) == {"batch_size": (128, 256)}
    assert len(written) == 14 and not (COMMITTED / ablation.MANIFEST_NAME).exists()


def test_the_ends_may_be_runs_of_another_folder_read_with_the_study(tmp_path: Path):
    # `ablate --ends-from CAMPAIGN`: the ends' runs stay in the campaign's folder; the report of both
    # folders finds them by their recorded specs.
    campaign, study = tmp_path / "campaign", tmp_path / "study"
    two = dataclasses.replace(REFERENCE, init="xavier", batch_size=128)
    ablation.prepare_grid(study, {"reference": REFERENCE, "two": two}, "test")
    finals = np.linspace(-900.0, -500.0, 4)
    for name, spec, root in (
        ("reference", REFERENCE, campaign),
        ("two", two, campaign),
        ("ref-init-xavier", dataclasses.replace(REFERENCE, init="xavier"), study),
        ("ref-batch_size-128", dataclasses.replace(REFERENCE, batch_size=128), study),
    ):
        for seed, final in enumerate(finals):
            write_run(root, "Pendulum-v1", name, seed, float(final), spec=spec.to_dict())
    out = tmp_path / "report"
    report.build_report(study, out, more_results=[campaign], variants=["two", "ref-init-xavier", "ref-batch_size-128"])
    rows = read_rows(out / "attribution.csv")
    assert [(r["difference"], r["role"], r["variant"], r["against"]) for r in rows] == [
        ("init", "added", "ref-init-xavier", "reference"),
        ("init", "removed", "ref-batch_size-128", "two"),
        ("batch_size", "added", "ref-batch_size-128", "reference"),
        ("batch_size", "removed", "ref-init-xavier", "two"),
    ]
    assert {r["n_pairs"] for r in rows} == {"4"}
    # The study's folder alone has no ends: every row says so rather than judging.
    report.build_report(study, tmp_path / "alone")
    assert {r["verdict"] for r in read_rows(tmp_path / "alone" / "attribution.csv")} == {"not run"}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_ablate_trains_a_users_variants_ablation_and_reports_the_attribution(tmp_path: Path):
    mine = tmp_path / "mine.toml"
    mine.write_text(
        '[[variant]]\nname = "two"\ndescription = "xavier, alpha loss"\ninit = "xavier"\nalpha_loss = "alpha"\n'
    )
    out = tmp_path / "results" / "two-ablation"
    tiny = ["--envs", "Pendulum-v1", "--seeds", "3", "--steps", "200", "--profile", "smoke", "--eval-episodes", "1"]
    tiny += ["--workers", "2", "--set", "learning_starts=50", "--set", "batch_size=32", "--set", "hidden_sizes=16,16"]
    tiny += ["--out", str(out)]
    done = run_cli("ablate", "two", "--variants-file", str(mine), *tiny, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # Two differences: reference + init is two - alpha_loss, so four variants, twelve runs.
    assert "grid: 4 variants x 1 envs x 3 seeds = 12 runs" in done.stdout
    rows = read_rows(tmp_path / "reports" / "two-ablation" / "attribution.csv")
    assert [(r["env"], r["difference"], r["role"], r["variant"], r["against"], r["n_pairs"]) for r in rows] == [
        ("Pendulum-v1", "alpha_loss", "added", "ref-alpha_loss-alpha", "reference", "3"),
        ("Pendulum-v1", "alpha_loss", "removed", "ref-init-xavier", "two", "3"),
        ("Pendulum-v1", "init", "added", "ref-init-xavier", "reference", "3"),
        ("Pendulum-v1", "init", "removed", "ref-alpha_loss-alpha", "two", "3"),
    ]
    verdicts = {inference.BETTER, inference.WORSE, inference.EQUIVALENT, inference.NO_DIFFERENCE}
    assert {r["verdict"] for r in rows} <= verdicts and {r["family_size"] for r in rows} == {"4"}
    page = (tmp_path / "reports" / "two-ablation" / "index.html").read_text()
    assert "Attribution: which of <code>two</code>" in page
    # The ablated variants ran with every run option (--set here) and the recorded command is ablate's.
    config = json.loads((out / "runs/Pendulum-v1/ref-init-xavier/seed_0/config.json").read_text())
    assert config["spec"]["hidden_sizes"] == [16, 16] and config["command"][3:5] == ["ablate", "two"]
    again = run_cli("ablate", "two", "--variants-file", str(mine), *tiny, "--dry-run", cwd=tmp_path)
    assert again.returncode == 0 and "12 already finished" in again.stdout, again.stdout + again.stderr
    # Input that run refuses leaves a new --out untouched: no manifest is written before the grid is checked.
    refused = run_cli(
        "ablate",
        "two",
        "--variants-file",
        str(mine),
        *tiny[:-1],
        str(tmp_path / "new"),
        "--set",
        "batch_size=4096",
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and "no gradient update" in refused.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "ablate VARIANT 'nope': not a catalog or --variants-file name"),
        (["reference"], "reference against itself"),
        (["sb3-sac"], "trained by sb3; only native specs ablate"),
        (["blog-sac2", "--ends-from", "no/such/folder"], "results folder no/such/folder does not exist"),
        (["blog-sac2", "--reference", "naive-tanh", "--ends-from", "."], "no runs of naive-tanh with that name"),
        (["blog-sac2", "--ends-from", ".", "--reference", "blog-sac2"], "blog-sac2 against itself"),
        (
            [
                "blog-sac2",
                "--envs",
                "LunarLanderContinuous-v3",
                "--ends-from",
                str(CAMPAIGN),
                "--until-decided",
                "--steps",
                "5000",
            ],
            "holds runs of a different configuration (budget",
        ),
    ],
)
def test_ablate_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], message: str):
    done = run_cli("ablate", *args, "--out", str(tmp_path / "out"), "--dry-run", cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()


def test_ablate_passes_runs_sequential_options_through(tmp_path: Path):
    # `run --until-decided` is one of run's options, so ablate's grid can add seeds look by look too.
    done = run_cli(
        "ablate", "blog-sac2", "--envs", "Pendulum-v1", "--profile", "smoke", "--until-decided", "--look-every", "2",
        "--max-seeds", "4", "--dry-run", "--out", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "look 1 of at most 2" in done.stdout and "blog-sac2-no-initial_alpha-initial_log_alpha  seed 1" in done.stdout
    )
    assert not (tmp_path / "out").exists()
    # against another reference the looks name that reference: no "reference" variant is needed
    other = run_cli(
        "ablate", "blog-sac2", "--reference", "reward-scaled", "--envs", "Pendulum-v1", "--profile", "smoke",
        "--until-decided", "--look-every", "2", "--max-seeds", "4", "--dry-run", "--out", str(tmp_path / "out"),
        cwd=tmp_path,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert "reward-scaled-initial_alpha-0.036-initial_log_alpha-0  seed 1" in other.stdout
    assert not (tmp_path / "out").exists()


def test_a_sequential_ablation_copies_the_ends_from_the_campaign_rather_than_training_them(tmp_path: Path):
    # The committed LunarLander campaign holds 10 finished seeds of blog-sac2 (decided at its look 1) and
    # 10 or more of the reference (its grid goes on): each below --max-seeds is copied, look 1 (5 seeds)
    # trains only the ablated variants, and a dry run neither copies nor writes.
    out = tmp_path / "out"
    reference = sorted(
        int(path.name.removeprefix("seed_"))
        for path in (CAMPAIGN / "runs/LunarLanderContinuous-v3/reference").glob("seed_*")
        if (path / "status.json").exists() and int(path.name.removeprefix("seed_")) < 15
    )
    assert reference == list(range(len(reference))) and len(reference) >= 10
    done = run_cli(
        "ablate", "blog-sac2", "--envs", "LunarLanderContinuous-v3", "--ends-from", str(CAMPAIGN),
        "--until-decided", "--max-seeds", "15", "--members", "4", "--dry-run", "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[0] == (
        f"would copy {len(reference) + 10} finished runs (LunarLanderContinuous-v3: reference seeds "
        f"0-{reference[-1]}, blog-sac2 seeds 0-9) from {CAMPAIGN}, not train them"
    )
    planned = [line.split() for line in said[2:-1]]
    names = {row[1] for row in planned}
    assert len(names) == 14 and not names & {"reference", "blog-sac2"}
    assert len(planned) == 14 * 2  # each ablated variant's seeds 0-3 as one job of 4 members, then seed 4
    assert said[-1].startswith("70 runs in 28 jobs, expected ")
    assert said[-1].endswith("if it decides nothing, the looks after it add at most 160 runs (seeds 5-14)")
    assert not out.exists()


def test_a_sequential_ablation_judges_copied_ends_and_trains_only_the_ablated(tmp_path: Path):
    mine = tmp_path / "mine.toml"
    mine.write_text(
        '[[variant]]\nname = "two"\ndescription = "xavier, alpha loss"\ninit = "xavier"\nalpha_loss = "alpha"\n'
    )
    tiny = ["--envs", "Pendulum-v1", "--steps", "200", "--profile", "smoke", "--eval-episodes", "1", "--workers", "2"]
    tiny += ["--set", "learning_starts=50", "--set", "batch_size=32", "--set", "hidden_sizes=16,16", "--no-report"]
    campaign, out = tmp_path / "campaign", tmp_path / "study"
    trained = run_cli("run", "--variants", "reference,two", "--variants-file", str(mine), "--seeds", "3", *tiny,
                      "--out", str(campaign), cwd=tmp_path)  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    done = run_cli("ablate", "two", "--variants-file", str(mine), "--ends-from", str(campaign), "--until-decided",
                   "--look-every", "3", "--max-seeds", "3", *tiny, "--out", str(out), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"copied 6 finished runs (Pendulum-v1: reference seeds 0-2, two seeds 0-2) from {campaign}" in (done.stdout)
    assert "(6 runs to train)" in done.stdout  # the two ablated variants' seeds 0-2, not the ends'
    for name in ("reference", "two"):
        for seed in (0, 1, 2):
            for record in ("config.json", "eval.csv", "status.json"):
                copied = out / "runs" / "Pendulum-v1" / name / f"seed_{seed}" / record
                assert (
                    copied.read_bytes()
                    == (campaign / "runs" / "Pendulum-v1" / name / f"seed_{seed}" / record).read_bytes()
                )
    state = json.loads((out / "looks.json").read_text())
    assert len(state["looks"]) == 1
    assert sorted(path.parent.name for path in out.glob("runs/Pendulum-v1/*/seed_2")) == [
        "ref-alpha_loss-alpha", "ref-init-xavier", "reference", "two",
    ]  # fmt: skip
    # The looks judged the attribution's own comparisons: each ablated variant against the end it is
    # compared with (with two differences, the variant less one is the reference plus the other, so each
    # ablated variant is compared twice), and the variant against the reference.
    assert state["design"]["compared"][0] == ["two", "reference"]
    assert sorted(state["design"]["compared"][1:]) == [
        ["ref-alpha_loss-alpha", "reference"], ["ref-alpha_loss-alpha", "two"],
        ["ref-init-xavier", "reference"], ["ref-init-xavier", "two"],
    ]  # fmt: skip
    judged = state["looks"][0]["judged"]["Pendulum-v1"]["final_return"]["decisions"]
    assert set(judged) == {"two", "ref-init-xavier", "ref-alpha_loss-alpha", "ref-alpha_loss-alpha vs two",
                           "ref-init-xavier vs two"}  # fmt: skip
    report.build_report(out, tmp_path / "report")
    rows = read_rows(tmp_path / "report" / "attribution.csv")
    assert {r["n_pairs"] for r in rows} == {"3"} and len(rows) == 4
    for r in rows:  # every row is the look's decision of that comparison
        key = r["variant"] if r["against"] == "reference" else f"{r['variant']} vs {r['against']}"
        assert float(r["estimate"]) == pytest.approx(judged[key]["difference"])
        assert float(r["ci_low"]) == pytest.approx(judged[key]["low"]) and r["family_size"] == "5"
    said = (tmp_path / "report" / "attribution.md").read_text()
    assert "Verdicts, intervals and seeds are the sequential grid's" in said and "does not hold" not in said
    assert "ref-init-xavier vs two" in (tmp_path / "report" / "index.html").read_text()


def test_attribution_rows_come_from_the_looks_only_when_the_looks_judged_every_row():
    from harness.judging import attribution, looks, sequential

    design = sequential.SequentialDesign(look_every=2, max_seeds=4)
    decision = sequential.Decision("a", "better", 0.5, 0.1, 0.9, 2, 1)
    rule_look = sequential.Look(1, "reference", design, {"a": decision}, {})
    record = looks.LookRecord(1, {"E": {"reference": 2, "a": 2}}, {"E": {"final_return": rule_look}}, {})
    state = looks.Looks(looks.design_record(design, "reference", ["E"], ["reference", "a"]), (record,))
    row = {"env": "E", "difference": "init", "change": "init: xavier", "role": "added", "units": "normalized"}
    row |= {"verdict": inference.NO_DIFFERENCE, "reading": "open", "estimate": 0.2, "ci_low": -0.1, "ci_high": 0.5}
    row |= {"mdd": 0.4, "paired": True, "n_pairs": 3, "n_runs": 3, "n_against_runs": 3, "family_size": 2}
    row |= {"level": 0.975}
    table = pd.DataFrame([row | {"variant": "a", "against": "reference"}], columns=attribution.ATTRIBUTION_COLUMNS)
    judged, every = attribution.from_looks(table, state)
    assert every and judged.loc[0, "verdict"] == "better" and judged.loc[0, "n_pairs"] == 2
    assert (judged.loc[0, "ci_low"], judged.loc[0, "ci_high"]) == (0.1, 0.9)
    assert judged.loc[0, "reading"] == "raises the score on its own"
    # a row the looks did not judge (here: b against a): the fixed table stands, with the caveat
    other = pd.DataFrame([row | {"variant": "b", "against": "a", "role": "removed"}], columns=table.columns)
    partial = pd.concat([table, other])
    kept, every = attribution.from_looks(partial.reset_index(drop=True), state)
    assert not every and kept.equals(partial.reset_index(drop=True))
