"""`harness run --until-decided`: looks of seeds, decisions written per look, resumed after a kill.

Most tests replace the training of a look (`grid.execute`) with one that writes run records of known
scores, so that what each look decides is known by hand; one test trains tiny real runs end to end.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import records, sequential_grid
from harness.judging import looks, normalization, sequential
from harness.judging.loading import DIAGNOSTICS_REQUIRED
from harness.running import grid
from harness.running.profiles import budget_for
from harness.running.train import Interrupted, Job
from variants import CATALOG

ENV = "Pendulum-v1"
SPAN = normalization.R_TARGET[ENV] - normalization.R_RANDOM[ENV]
ERROR = "RuntimeError: modified by an inplace operation"


def normalized_score(variant: str, seed: int) -> float | None:
    """The made-up score of each run: the reference wanders from seed to seed; joint-update is 0.5 above
    it on every seed (better), naive-tanh within +-0.002 of it (equivalent); critic-first fails (None)."""
    base = 0.3 + 0.1 * np.sin(seed)
    return {
        "reference": base,
        "joint-update": base + 0.5 + 0.01 * np.cos(3 * seed),
        "naive-tanh": base + 0.002 * np.cos(5 * seed),
        "critic-first": None,
    }[variant]


def write_run(job: Job, seed: int) -> None:
    """A finished run folder of `job`'s seed whose every evaluation returns `normalized_score`."""
    folder = records.run_dir(Path(job.out), job.env_id, job.variant, seed)
    score = normalized_score(job.variant, seed)
    steps = job.budget.eval_steps()
    value = normalization.R_RANDOM[ENV] - 100.0 if score is None else normalization.R_RANDOM[ENV] + score * SPAN
    shown = steps[:1] if score is None else steps  # a failure stops after its first evaluation
    records.write_json(folder / "config.json", job.run_config(seed))
    records.write_csv(folder / "eval.csv", records.EVAL_COLUMNS, [(s, value, 0.0, 1) for s in shown])
    records.write_csv(folder / "diagnostics.csv", DIAGNOSTICS_REQUIRED, [(shown[-1], 1, *[0.0] * 6)])
    status = {"state": "complete", "env_steps": shown[-1], "wall_s": 1.0, "final_return": value, "auc_return": value}
    if score is None:
        status |= {"state": "failed", "error": ERROR, "error_step": shown[-1]}
    records.write_json(folder / "status.json", status)


class FakeTraining:
    """Stands in for `grid.execute`: writes each job's runs (`write_run`), remembers what it trained, and
    raises `Interrupted` (as Ctrl-C does) once `stop_after` runs are written, if given."""

    def __init__(self, stop_after: int | None = None):
        self.trained: list[tuple[str, int]] = []
        self.stop_after = stop_after

    def __call__(self, jobs, workers, log=print, on_finished=None, deadline=None, paced_since=None):
        for job in jobs:
            for seed in job.seeds:
                if self.stop_after is not None and len(self.trained) >= self.stop_after:
                    raise Interrupted("stopped the running jobs")
                write_run(job, seed)
                self.trained.append((job.variant, seed))
        return []


def request(out: Path, variants=("reference", "critic-first", "naive-tanh", "joint-update")) -> grid.GridRequest:
    return grid.GridRequest(
        variants={v: CATALOG[v] for v in variants},
        overrides={},
        envs=[ENV],
        seeds=[0],
        budgets={ENV: budget_for("smoke", ENV, 200)},
        out=out,
        device="cpu",
        members=1,
        command=("python", "-m", "harness", "run"),
    )


DESIGN = sequential.SequentialDesign(rule="paired", look_every=2, max_seeds=6)


def run(out: Path, training: FakeTraining, monkeypatch, design=DESIGN, **kwargs) -> looks.Looks:
    monkeypatch.setattr(grid, "execute", training)
    return sequential_grid.run_until_decided(request(out, **kwargs), design, "reference", 1, log=lambda line: None)


def by_key(state: looks.Looks) -> dict[tuple[str, str], looks.Comparison]:
    return {(c.variant, c.metric): c for c in looks.comparisons(state)}


def test_each_comparison_is_decided_at_its_look_and_a_decided_variant_gets_no_more_seeds(tmp_path, monkeypatch):
    training = FakeTraining()
    state = run(tmp_path, training, monkeypatch)
    found = by_key(state)
    for metric in ("final_return", "auc_return"):
        failed = found[("critic-first", metric)]  # fails on both seeds of look 1, the same error at the same step
        assert (failed.verdict, failed.look, failed.seeds, failed.basis) == ("worse", 1, 2, looks.FAILURE)
        assert failed.note == f"{ERROR} (at step 10)"
        assert "(every run failed: RuntimeError at step 10)" in looks.comparison_text(failed, state)
        better = found[("joint-update", metric)]
        assert better.verdict == "better" and better.low > 0 and better.seeds == better.look * 2
        same = found[("naive-tanh", metric)]
        assert same.verdict == "equivalent" and -0.05 <= same.low <= same.high <= 0.05
    # critic-first's two failures closed it at look 1: seeds 0 and 1 only; the reference ran on while
    # anything was open, and no variant got a seed past the last look it was open at.
    seeds = {v: sorted(s for name, s in training.trained if name == v) for v in request(tmp_path).variants}
    assert seeds["critic-first"] == [0, 1]
    last_open = {v: max(c.look for c in looks.comparisons(state) if c.variant == v) for v in seeds if v != "reference"}
    for variant, look in last_open.items():
        assert seeds[variant] == list(range(2 * look))
    assert seeds["reference"] == list(range(2 * max(last_open.values())))
    assert state.end == looks.END_DECIDED
    assert looks.read_looks(tmp_path) == state  # what was written is what was decided


def test_a_comparison_still_open_at_the_maximum_stops_the_grid_at_max_seeds(tmp_path, monkeypatch):
    # The adastop rule gives no equivalence: naive-tanh's near-zero difference stays open to 6 seeds.
    design = sequential.SequentialDesign(rule="adastop", look_every=2, max_seeds=6)
    state = run(tmp_path, FakeTraining(), monkeypatch, design, variants=("reference", "naive-tanh"))
    assert state.end == looks.END_MAXIMUM and len(state.looks) == 3
    for c in looks.comparisons(state):
        assert (c.verdict, c.seeds, c.look) == ("open", 6, 3)
        assert looks.comparison_text(c, state).startswith("open at the maximum, 6 seeds")
    assert "the maximum of 6 seeds reached" in looks.summary_lines(state)[0]


def test_before_the_first_look_the_summary_is_the_design_line_alone(tmp_path):
    # A grid stopped before look 1 was judged: no comparison has seeds yet, so none is listed as open.
    req = request(tmp_path)
    record = looks.design_record(DESIGN, "reference", req.envs, list(req.variants))
    state = sequential_grid.start_or_resume(tmp_path, record)
    lines = looks.summary_lines(state)
    assert len(lines) == 1 and lines[0].endswith("0 of at most 3 looks judged; a rerun of the grid's command goes on")


@pytest.mark.parametrize("stop_after", [1, 5, 8, 11])  # the whole grid trains 12 runs, 8 in look 1
def test_a_grid_stopped_mid_look_resumes_to_the_same_decisions(tmp_path, monkeypatch, stop_after):
    whole = run(tmp_path / "whole", FakeTraining(), monkeypatch)
    with pytest.raises(Interrupted):
        run(tmp_path / "stopped", FakeTraining(stop_after=stop_after), monkeypatch)
    rest = FakeTraining()
    resumed = run(tmp_path / "stopped", rest, monkeypatch)
    assert resumed == whole
    assert (tmp_path / "stopped/looks.json").read_bytes() == (tmp_path / "whole/looks.json").read_bytes()
    assert len(set(rest.trained)) == len(rest.trained)  # nothing trained twice
    assert looks.summary_lines(resumed) == looks.summary_lines(whole)


def test_a_grid_killed_between_its_last_run_and_writing_the_look_judges_it_on_the_rerun(tmp_path, monkeypatch):
    whole = run(tmp_path / "whole", FakeTraining(), monkeypatch)
    write = looks.write_looks

    def killed_at_look_2(results, state):
        if len(state.looks) == 2:
            raise KeyboardInterrupt
        write(results, state)

    monkeypatch.setattr(looks, "write_looks", killed_at_look_2)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", FakeTraining(), monkeypatch)
    assert len(looks.read_looks(tmp_path / "killed").looks) == 1
    monkeypatch.setattr(looks, "write_looks", write)
    rest = FakeTraining()
    assert run(tmp_path / "killed", rest, monkeypatch) == whole and rest.trained == []


def test_a_grid_resumed_after_its_last_look_trains_nothing_more(tmp_path, monkeypatch):
    whole = run(tmp_path, FakeTraining(), monkeypatch)
    again = FakeTraining()
    assert run(tmp_path, again, monkeypatch) == whole and again.trained == []


def test_looks_of_another_design_are_refused_in_one_line(tmp_path, monkeypatch):
    run(tmp_path, FakeTraining(), monkeypatch)
    other = sequential.SequentialDesign(rule="paired", look_every=2, max_seeds=8)
    with pytest.raises(sequential_grid.SequentialGridError, match=r"\(max_seeds 6 there, 8 now\); use another --out"):
        run(tmp_path, FakeTraining(), monkeypatch, other)
    (tmp_path / "looks.json").write_text("{not json")
    with pytest.raises(sequential_grid.SequentialGridError, match="not a readable record of looks"):
        run(tmp_path, FakeTraining(), monkeypatch)


def test_a_single_failure_or_failures_that_differ_are_left_to_the_rule():
    import pandas as pd

    def runs(reasons):
        return pd.DataFrame(
            {
                "env": ENV,
                "variant": ["v"] * len(reasons) + ["reference"] * len(reasons),
                "seed": [*range(len(reasons))] * 2,
                "state": ["failed" if r else "complete" for r in reasons] + ["complete"] * len(reasons),
                "reason": [*reasons, *[""] * len(reasons)],
            }
        )

    assert (
        looks.recurring_failure(runs(["E (at step 5)", "E (at step 5)"]), ENV, "v", "reference", 2) == "E (at step 5)"
    )
    assert (
        looks.recurring_failure(runs(["E (at step 5)"]), ENV, "v", "reference", 1) is None
    )  # one seed is not a pattern
    assert looks.recurring_failure(runs(["E (at step 5)", "E (at step 9)"]), ENV, "v", "reference", 2) is None
    assert looks.recurring_failure(runs(["E (at step 5)", ""]), ENV, "v", "reference", 2) is None
    assert looks.recurring_failure(runs(["E: x (at step 5)", "F: x (at step 5)"]), ENV, "v", "reference", 2) is None


def test_failures_whose_messages_differ_only_in_numbers_are_the_same_error():
    # critic-first's in-place error on BipedalWalker: the autograd version counter differs from seed to
    # seed, and on HalfCheetah the tensor's shape holds the job's member count (8 = 4 members x 2 critics).
    import pandas as pd

    error = "RuntimeError: [torch.FloatTensor [{shape}, 23, 256]] is at version {v}; expected version {w} instead"
    reasons = [
        error.format(shape=2, v=1, w=0) + " (at step 1001)",
        error.format(shape=8, v=2, w=1) + " (at step 1001)",
        error.format(shape=8, v=1, w=0) + " (at step 1001)",
    ]
    frame = pd.DataFrame(
        {
            "env": ENV,
            "variant": ["v"] * 3 + ["reference"] * 3,
            "seed": [0, 1, 2] * 2,
            "state": ["failed"] * 3 + ["complete"] * 3,
            "reason": [*reasons, "", "", ""],
        }
    )
    assert looks.failure_signature(reasons[1]) == (
        "RuntimeError: [torch.FloatTensor [#, #, #]] is at version #; expected version # instead (at step 1001)"
    )
    assert looks.recurring_failure(frame, ENV, "v", "reference", 3) == reasons[0]  # the first seed's reason
    at_another_step = frame.assign(reason=[*reasons[:2], reasons[2].replace("1001", "2001"), "", "", ""])
    assert looks.recurring_failure(at_another_step, ENV, "v", "reference", 3) is None
    both_fail = frame.assign(state="failed", reason=[*reasons, *reasons])
    assert looks.recurring_failure(both_fail, ENV, "v", "reference", 3) is None  # the reference fails so too


def unbounded_looks() -> looks.Looks:
    """One look whose decisions and rule state hold every non-finite float; one variant is named "inf"."""
    decisions = {
        "v": sequential.Decision("v", sequential.OPEN, 0.1, -np.inf, np.inf, 1, 1),
        "inf": sequential.Decision("inf", sequential.OPEN, math.nan, -math.inf, math.inf, 0, 1),
    }
    rule = sequential.Look(1, "reference", DESIGN, decisions, {"critical": [np.inf, 2.5], "correlation": [[math.nan]]})
    return looks.Looks(
        looks.design_record(DESIGN, "reference", [ENV], ["reference", "v", "inf"]),
        (looks.LookRecord(1, {ENV: {"reference": 2, "v": 2, "inf": 2}}, {ENV: {"final_return": rule}}, {}),),
    )


def refuse_constant(token: str):
    raise AssertionError(f"looks.json holds the non-standard JSON token {token}")


def test_looks_json_is_standard_json_read_back_exactly_infinite_intervals_included(tmp_path):
    state = unbounded_looks()
    looks.write_looks(tmp_path, state)
    text = (tmp_path / "looks.json").read_text()
    raw = json.loads(text, parse_constant=refuse_constant)  # no bare Infinity, -Infinity or NaN
    decision = raw["looks"][0]["judged"][ENV]["final_return"]["decisions"]["v"]
    assert (decision["low"], decision["high"]) == ("-inf", "inf")
    assert looks.read_looks(tmp_path) == state
    assert raw["design"]["variants"] == ["v", "inf"]  # a name is never read as a number


def test_looks_json_with_bare_infinity_from_an_earlier_version_still_reads(tmp_path):
    state = unbounded_looks()
    # What earlier versions wrote: the rule's dicts as they are, non-finite floats as Python's json tokens.
    data = {
        "design": state.design,
        "looks": [
            {
                "look": 1,
                "seeds": state.looks[0].seeds,
                "judged": {ENV: {"final_return": state.looks[0].judged[ENV]["final_return"].to_dict()}},
                "failures": {},
            }
        ],
        "end": None,
    }
    (tmp_path / "looks.json").write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=True) + "\n")
    assert "Infinity" in (tmp_path / "looks.json").read_text()
    read = looks.read_looks(tmp_path).looks[0].judged[ENV]["final_return"]
    expected = state.looks[0].judged[ENV]["final_return"]
    assert read.decisions["v"] == expected.decisions["v"] and read.state["critical"] == expected.state["critical"]
    assert math.isnan(read.decisions["inf"].difference) and math.isnan(read.state["correlation"][0][0])


def test_the_report_shows_each_comparison_and_when_it_was_decided(tmp_path, monkeypatch):
    from harness.judging.report import build_report

    run(tmp_path / "grid", FakeTraining(), monkeypatch)
    summary = build_report(tmp_path / "grid", tmp_path / "report")
    page = summary.index_html.read_text()
    assert "Sequential verdicts: the looks of this grid" in page
    assert "worse, decided at look 1, 2 seeds (every run failed: RuntimeError at step 10)" in page
    assert "better, decided at look 2, 4 seeds" in page
    assert page.index("Sequential verdicts") < page.index("Verdicts: each variant vs")
    table = (tmp_path / "report/looks.csv").read_text().splitlines()
    assert (
        table[0]
        == "env,variant,metric,verdict,difference,low,high,seeds,look,basis,note,against,stopped,predictive_power"
    )
    assert len(table) == 1 + 3 * 2  # three comparisons, two metrics
    # findings.md's verdict columns are the looks', not the fixed rule's on the seeds the looks chose.
    findings = (tmp_path / "report/findings.md").read_text()
    assert "the looks of the sequential grid that trained these runs" in findings
    assert "| critic-first | 2 (2 failed) |" in findings
    assert "worse at look 1 (2 seeds; every run failed) | worse at look 1 (2 seeds; every run failed) |" in findings
    assert "| better at look 2 (4 seeds): +" in findings and "no detectable difference" not in findings


def test_each_look_is_told_in_one_line(tmp_path, monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(grid, "execute", FakeTraining())
    sequential_grid.run_until_decided(request(tmp_path), DESIGN, "reference", 1, log=lines.append)
    judged = [line for line in lines if " judged: " in line]
    assert judged[0] == (
        f"look 1 judged: {ENV} critic-first worse (failure) on final_return, auc_return; {ENV} naive-tanh "
        "equivalent on final_return, auc_return; 2 comparison(s) open"
    )
    assert judged[1] == f"look 2 judged: {ENV} joint-update better on final_return, auc_return; 0 comparison(s) open"


def test_a_grid_that_cannot_be_judged_look_by_look_is_refused_in_one_line(tmp_path):
    with pytest.raises(sequential_grid.SequentialGridError, match="add it to --variants"):
        sequential_grid.check_request(request(tmp_path, variants=("naive-tanh",)), DESIGN, "reference")
    with pytest.raises(sequential_grid.SequentialGridError, match="needs a variant besides reference"):
        sequential_grid.check_request(request(tmp_path, variants=("reference",)), DESIGN, "reference")
    raw = dataclasses.replace(request(tmp_path), envs=["MountainCarContinuous-v0"])
    with pytest.raises(sequential_grid.SequentialGridError, match="--random ENV=RETURN for MountainCarContinuous-v0"):
        sequential_grid.check_request(raw, DESIGN, "reference")
    anchored = dataclasses.replace(raw, normalization={"MountainCarContinuous-v0": {"target": 90.0, "random": -30.0}})
    sequential_grid.check_request(anchored, DESIGN, "reference")  # --target/--random given: accepted


# --- end to end: `harness run --until-decided` with tiny real runs ----------------------------------

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "learning_starts=100", "--set", "hidden_sizes=32,32", "--set", "batch_size=64"]


def until_decided_args(out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--variants",
        "reference,critic-first,naive-tanh",
        "--envs",
        ENV,
        "--profile",
        "smoke",
        "--steps",
        "300",
        *SMALL,
        "--until-decided",
        "--look-every",
        "2",
        "--max-seeds",
        "4",
        "--workers",
        "1",
        "--no-report",
        "--out",
        str(out),
        *extra,
    ]


def test_until_decided_closes_a_failing_variant_at_look_1_and_a_killed_grid_resumes_to_the_same_decisions(
    tmp_path, capsys
):
    import os
    import signal
    import subprocess
    import sys
    import time

    from harness.cli import main

    assert main(until_decided_args(tmp_path / "whole")) == 0
    printed = capsys.readouterr().out
    assert "look 1 judged: Pendulum-v1 critic-first worse (failure) on final_return, auc_return" in printed
    whole = looks.read_looks(tmp_path / "whole")
    found = by_key(whole)
    assert (found[("critic-first", "final_return")].look, found[("critic-first", "final_return")].seeds) == (1, 2)
    assert sorted(p.name for p in (tmp_path / "whole/runs" / ENV / "critic-first").iterdir()) == ["seed_0", "seed_1"]
    tanh = found[("naive-tanh", "final_return")]
    assert tanh.verdict != "open" or (whole.end == looks.END_MAXIMUM and tanh.seeds == 4)
    assert main(["status", str(tmp_path / "whole")]) == 0
    status = capsys.readouterr().out
    assert "critic-first vs reference, final_return: worse, decided at look 1, 2 seeds (every run failed" in status
    assert f"naive-tanh vs reference, final_return: {looks.comparison_text(tanh, whole)}" in status

    # Killed (SIGKILL) while look 1 trains its fourth run, then rerun: the same looks, byte for byte.
    command = [sys.executable, "-m", "harness", *until_decided_args(tmp_path / "killed")]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = records.run_dir(tmp_path / "killed", ENV, "reference", 1) / "config.json"
    deadline = time.time() + 300
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed/looks.json").exists()  # killed before look 1 was judged
    resumed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "killed/looks.json").read_bytes() == (tmp_path / "whole/looks.json").read_bytes()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--look-every", "1"], "--look-every must be at least 2"),
        (["--max-seeds", "1"], "--max-seeds (1) must be at least --look-every (2)"),
        (["--rule", "coin"], "unknown sequential rule 'coin' (known: paired, adastop)"),
        (["--backend", "ray"], "--until-decided works with the local backend only"),
        (["--fresh"], "--until-decided with --fresh"),
        (["--futility", "1.5"], "--futility is a predictive power: it must lie in (0, 1), not 1.5"),
    ],
)
def test_bad_sequential_options_are_one_line_and_exit_2(tmp_path, capsys, extra, message):
    from harness.cli import main

    assert main([*until_decided_args(tmp_path / "g"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g/runs").exists()


def test_sequential_options_without_until_decided_are_refused_in_one_line(tmp_path, capsys):
    from harness.cli import main

    args = [a for a in until_decided_args(tmp_path / "g") if a != "--until-decided"]
    assert main([*args, "--futility", "0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: only --until-decided uses --look-every, --max-seeds, --futility: add it, or drop them"]
    assert not (tmp_path / "g").exists()


def test_the_defaults_the_help_states_are_the_designs(capsys):
    from harness.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    default = sequential.SequentialDesign()
    assert f"seeds per look (default {default.look_every})" in text
    assert f"the most seeds a comparison gets (default {default.max_seeds})" in text
    assert f"{default.rule} (default;" in text
    assert sequential_grid.design_from(None, None, None) == default


def test_over_two_envs_each_env_is_judged_at_half_the_alpha(tmp_path, monkeypatch):
    two = dataclasses.replace(
        request(tmp_path, variants=("reference", "joint-update")),
        envs=[ENV, "LunarLanderContinuous-v3"],
        budgets={ENV: budget_for("smoke", ENV, 200), "LunarLanderContinuous-v3": budget_for("smoke", ENV, 200)},
    )
    seen: list[float] = []
    decide = sequential.decide_look

    def spy(scores, reference, look_index, design, previous=None, compared=None):
        seen.append(design.alpha)
        return decide(scores, reference, look_index, design, previous, compared)

    monkeypatch.setattr(sequential, "decide_look", spy)
    monkeypatch.setattr(grid, "execute", FakeTraining())
    state = sequential_grid.run_until_decided(two, DESIGN, "reference", 1, log=lambda line: None)
    assert seen and set(seen) == {DESIGN.alpha / 2}
    assert (
        "family-wise error 0.05 per metric over all looks and comparisons (split evenly over 2 envs)"
        in (looks.summary_lines(state)[0])
    )


def test_a_dry_run_prints_the_next_looks_runs_and_writes_nothing(tmp_path, capsys):
    from harness.cli import main

    assert main([*until_decided_args(tmp_path / "g"), "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "look 1 of at most 2 (seeds 0-1): would train, in this order:"
    assert printed[1].split() == [ENV, "reference", "seed", "0", "(300", "steps)"]
    assert len(printed) == 1 + 6 + 1  # three variants x seeds 0 and 1, then their cost
    # No run in the folder yet: each is expected at grid.SECONDS_PER_MEMBER_STEP a step.
    minutes = 6 * 300 * grid.SECONDS_PER_MEMBER_STEP / 60
    assert printed[-1] == (
        f"6 runs in 6 jobs, expected {minutes:,.0f} min on 1 worker; if it decides nothing, the looks after it "
        "add at most 6 runs (seeds 2-3)"
    )
    assert not (tmp_path / "g/looks.json").exists() and not (tmp_path / "g/runs").exists()


def test_a_dry_run_judges_in_memory_the_looks_whose_runs_are_finished_and_lists_the_next(tmp_path):
    # Look 1's runs on disk and no looks.json: a study switched to the sequential rule. The dry run judges
    # look 1 as the grid would (critic-first failed on both seeds, naive-tanh equivalent) and lists look 2's
    # runs: seeds 2 and 3 of the reference and joint-update only; it writes nothing.
    req = request(tmp_path)
    FakeTraining()(sequential_grid.plan_look(req, {ENV: list(req.variants)}, 2), 1)
    before = sorted(str(path) for path in tmp_path.rglob("*"))
    text = sequential_grid.dry_run_text(req, DESIGN, "reference").splitlines()
    assert text[0] == (
        "look 1 of at most 3 (seeds 0-1): every run is finished; judged now, in memory (look 1 judged: "
        f"{ENV} critic-first worse (failure) on final_return, auc_return; {ENV} naive-tanh equivalent on "
        "final_return, auc_return; 2 comparison(s) open)"
    )
    assert text[1] == "look 2 of at most 3 (seeds 0-3): would train, in this order:"
    assert [line.split()[1:4] for line in text[2:-1]] == [
        ["reference", "seed", "2"],
        ["joint-update", "seed", "2"],
        ["reference", "seed", "3"],
        ["joint-update", "seed", "3"],
    ]
    # Timed from look 1's runs of each variant; seeds 4-5 of the two follow if look 2 decides nothing.
    jobs = sequential_grid.plan_look(req, {ENV: ["reference", "joint-update"]}, 4)
    minutes = grid.estimate_seconds(jobs, 1) / 60
    assert text[-1] == (
        f"4 runs in 4 jobs, expected {minutes:,.0f} min on 1 worker; if it decides nothing, the looks after it "
        "add at most 4 runs (seeds 4-5)"
    )
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before  # no looks.json, no run


def test_a_grid_that_asks_for_a_rule_measured_above_its_level_is_told_so(tmp_path, capsys):
    from harness.cli import main

    assert main([*until_decided_args(tmp_path / "g"), "--rule", "adastop", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "warning: the adastop rule's family-wise error measured 6.6-8.6% (not 5%)" in err
    assert main([*until_decided_args(tmp_path / "g"), "--dry-run"]) == 0
    assert "warning" not in capsys.readouterr().err  # the paired rule holds its level: nothing to say


def test_status_names_an_unreadable_looks_json_and_still_lists_the_runs(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    run(tmp_path, FakeTraining(), monkeypatch)
    assert main(["status", str(tmp_path)]) == 0
    assert "stopped after look 2: every comparison decided" in capsys.readouterr().out
    (tmp_path / "looks.json").write_text('{"design": {}}')
    assert main(["status", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "total: 10 complete, 2 failed" in printed
    assert f"warning: {tmp_path / 'looks.json'} is not a readable record of looks (KeyError" in printed


def test_until_decided_refuses_seeds_in_one_line(tmp_path, capsys):
    from harness.cli import main

    assert main(until_decided_args(tmp_path / "out", "--seeds", "3", "--dry-run")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-seeds" in err[0]
    assert not (tmp_path / "out").exists()


def test_futility_stops_giving_seeds_to_a_hopeless_variant_and_a_rerun_without_it_goes_on(tmp_path, monkeypatch):
    # naive-tanh made noise around the reference (differences +-0.3 alternating, mean ~0): at 6 seeds its interval
    # could neither exclude 0 nor fit within +-0.05, so at look 1 its predictive power is ~0.
    plain = normalized_score

    def noisy(variant: str, seed: int) -> float | None:
        noise = 0.3 * (-1) ** seed * (1 + 0.1 * seed)
        return plain("reference", seed) + noise if variant == "naive-tanh" else plain(variant, seed)

    monkeypatch.setattr(sys.modules[__name__], "normalized_score", noisy)
    design = dataclasses.replace(DESIGN, futility=0.1)
    training = FakeTraining()
    state = run(tmp_path, training, monkeypatch, design, variants=("reference", "naive-tanh", "joint-update"))
    found = by_key(state)
    for metric in ("final_return", "auc_return"):
        stopped = found[("naive-tanh", metric)]
        assert (stopped.verdict, stopped.stopped, stopped.look, stopped.seeds) == ("open", True, 1, 2)
        assert stopped.predictive_power < 0.1
        text = looks.comparison_text(stopped, state)
        assert text.startswith("open, stopped for futility at look 1, 2 seeds") and "at 6 seeds)" in text
        assert found[("joint-update", metric)].verdict == "better"
    # joint-update, decided at look 2 (two seeds give too wide an interval), ended the grid
    assert state.end == looks.END_FUTILITY and len(state.looks) == 2
    seeds = {
        v: sorted(s for name, s in training.trained if name == v) for v in ("reference", "naive-tanh", "joint-update")
    }
    assert seeds == {"reference": [0, 1, 2, 3], "naive-tanh": [0, 1], "joint-update": [0, 1, 2, 3]}
    assert "every comparison decided or stopped for futility" in looks.summary_lines(state)[0]
    assert "futility below 10% predictive power (non-binding)" in looks.summary_lines(state)[0]
    assert looks.read_looks(tmp_path) == state
    # Futility is non-binding: the same grid rerun without it gives the stopped comparisons their seeds.
    more = FakeTraining()
    resumed = run(tmp_path, more, monkeypatch, DESIGN, variants=("reference", "naive-tanh", "joint-update"))
    assert {v for v, _ in more.trained} == {"reference", "naive-tanh"} and max(s for _, s in more.trained) >= 3
    assert resumed.design["futility"] is None and resumed.end in (looks.END_DECIDED, looks.END_MAXIMUM)
    assert not any(c.stopped for c in looks.comparisons(resumed) if c.variant == "naive-tanh")


def test_a_grid_judges_the_comparisons_it_is_given_and_trains_both_sides(tmp_path, monkeypatch):
    # joint-update is 0.5 above the reference; naive-tanh within 0.002 of the reference, so 0.5 below
    # joint-update: compared with joint-update, naive-tanh is worse.
    monkeypatch.setattr(grid, "execute", FakeTraining())
    compared = [("joint-update", "reference"), ("naive-tanh", "joint-update")]
    grid_request = request(tmp_path, variants=("reference", "naive-tanh", "joint-update"))
    state = sequential_grid.run_until_decided(
        grid_request, DESIGN, "reference", 1, log=lambda line: None, compared=compared
    )
    assert state.design["compared"] == [["joint-update", "reference"], ["naive-tanh", "joint-update"]]
    found = {(c.variant, c.against, c.metric): c for c in looks.comparisons(state)}
    assert len(found) == 4  # two comparisons, two metrics: naive-tanh is not compared with the reference
    for metric in ("final_return", "auc_return"):
        assert found[("joint-update", "reference", metric)].verdict == "better"
        worse = found[("naive-tanh", "joint-update", metric)]
        assert worse.verdict == "worse" and worse.difference == pytest.approx(-0.5, abs=0.02)
    assert "  Pendulum-v1 naive-tanh vs joint-update, final_return: worse" in "\n".join(looks.summary_lines(state))
    with pytest.raises(sequential_grid.SequentialGridError, match="compares ghost, which the grid does not train"):
        sequential_grid.check_request(grid_request, DESIGN, "reference", [("naive-tanh", "ghost")])
