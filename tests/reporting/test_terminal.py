"""`nccl-tune report` (the terminal report and `--json`) of a real study of the tiny trainer: each
trial the default sampler proposed says why, read back from the storage; the others say nothing."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.reporting.json_report import trial_row
from nccl_tune.reporting.terminal import print_report
from nccl_tune.reporting.view import load_view
from nccl_tune.search_spaces.describe import describe
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli, study_trials

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def proposed(tmp_path_factory):
    """(folder, {trial number: its stored `why`}) of a study: the baseline, three moves, one re-run."""
    root = tmp_path_factory.mktemp("why")
    proc = run_cli(
        [
            "run",
            "--space",
            str(TINY_SPACE),
            "--study",
            "w",
            "--trials",
            "4",
            "--seed",
            "3",
            "--confirm",
            "1",
            "--set",
            "trainer.offload=false",
            "--",
            sys.executable,
            str(TINY_TRAINER),
        ],
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    stored = {t.number: t.user_attrs.get("why") for t in study_trials(root)}
    assert stored[0] is None and any(stored.values()), stored  # the baseline has none, some moves have one
    return root, stored


def test_json_rows_carry_why_for_proposed_trials_only(proposed):
    root, stored = proposed
    proc = run_cli(["report", "--json"], cwd=root)
    assert proc.returncode == 0, proc.stderr
    rows = {r["number"]: r for r in json.loads(proc.stdout)["trials"]}
    assert {n: r["why"] for n, r in rows.items()} == stored
    assert rows[0]["kind"] == "baseline" and rows[0]["why"] is None
    reruns = [r["why"] for r in rows.values() if r["kind"] == "rerun"]  # confirmation, the baseline again
    assert reruns and all(w is None for w in reruns), reruns
    assert all(
        re.match(
            r"((compound move|move|pair of moves|jump|move without a partner|pair that may interact|untried pair) from trial \d+: |TPE, since )",
            w,
        )
        for w in stored.values()
        if w
    )


def test_piped_report_prints_why_under_each_proposed_trial(proposed):
    root, stored = proposed
    lines = run_cli(["report"], cwd=root).stdout.splitlines()
    rows = [(int(m.group(1)), lines[i + 1]) for i, line in enumerate(lines) if (m := re.match(r"  trial (\d+) ", line))]
    assert [n for n, _ in rows] == sorted(stored)
    for number, below in rows:
        why = stored[number]
        assert below == f"    why: {why}" if why else not below.startswith("    why:"), (number, below)
    assert sum(line.startswith("    why: ") for line in lines) == sum(1 for w in stored.values() if w)
    assert "None" not in "\n".join(lines)


def test_terminal_table_shows_why_under_the_values(proposed):
    root, stored = proposed
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system=None, width=200)
    print_report(load_view(f"sqlite:///{root}/results/nccl-tune.db", None), console)
    text = buf.getvalue()
    assert "┃" in text  # the table, not the piped lines
    for why in filter(None, stored.values()):
        assert f"why: {why}" in text
    assert text.count("why: ") == sum(1 for w in stored.values() if w) and "None" not in text


def test_json_rows_carry_the_memory_per_phase_and_the_phase_that_peaked():
    memory = MemoryReport(
        "nvml",
        gpus=(GpuMemory(0, 80.0, 63.2),),
        phase_peak_frac={"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05},
    )
    result = TrialResult(
        number=2, status=FailureClass.OK, verdict=OK_VERDICT, stop_reason=StopReason.MEASURED, memory=memory
    )
    record = TrialRecord(
        number=2,
        state=TrialState.COMPLETE,
        values={"micro": 4},
        kind=TrialKind.SEARCH,
        outcome=Outcome.LAUNCHED,
        status=FailureClass.OK,
        result=result,
    )
    row = json.loads(json.dumps(trial_row(record)))
    assert row["peak_phase"] == "policy_train"
    assert row["phase_peak_frac"] == {"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05}


def test_the_run_summary_names_a_faster_trial_set_aside_at_the_memory_wall():
    """What `report` says of a faster config left out near the wall, the end of `run` says too."""
    from nccl_tune.reporting.terminal import print_summary
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.tuner.records.stability import select_winner

    space = load_space(str(TINY_SPACE))

    def rec(number: int, micro: int, step_s: float, peak_gib: float, kind=TrialKind.SEARCH) -> TrialRecord:
        memory = MemoryReport("nvml", gpus=(GpuMemory(0, 80.0, peak_gib),))
        result = TrialResult(
            number=number,
            status=FailureClass.OK,
            verdict=OK_VERDICT,
            stop_reason=StopReason.MEASURED,
            step_times_s=(step_s, step_s),
            samples_per_step=8.0 * micro,
            memory=memory,
        )
        values = {"trainer.micro": micro, "trainer.offload": False, "NCCL_ALGO": "unset"}
        near = peak_gib > 80.0 * (1 - space.min_headroom_frac)
        return TrialRecord(
            number, TrialState.COMPLETE, values, kind, Outcome.LAUNCHED, FailureClass.OK, result, near_wall=near
        )

    records = [rec(0, 2, 0.1, 44.0, TrialKind.BASELINE), rec(1, 2, 0.1, 44.0, TrialKind.RERUN), rec(2, 8, 0.1, 78.0)]
    winner = select_winner(records, require_confirmation=False)
    assert winner is not None and winner.first.number == 0
    buf = io.StringIO()
    print_summary(Console(file=buf, width=80), space, records, winner, None)
    text = buf.getvalue()
    assert re.search(
        r"set aside: trial 2 was faster \(640\.0 samples/s\) but came within 5% of the memory wall", text
    ), text


@pytest.mark.parametrize("width", [80, 200])
def test_the_report_on_a_terminal_keeps_names_whole_at_any_width(tiny_study, width):
    """At 80 columns each trial is a block wrapped between words; wide, a table: either way every
    value a trial set reads whole on one line and nothing runs past the width."""
    view = load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", "t")
    buf = io.StringIO()
    print_report(view, Console(file=buf, force_terminal=True, width=width, color_system=None))
    lines = buf.getvalue().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines), [line for line in lines if len(line.rstrip()) > width]
    words = {w for r in view.launched for w in describe(view.space, r.values, view.baseline.values).split()}
    text = buf.getvalue()
    assert words and all(w in text for w in words), words
    assert ("┃" in text) == (width >= 120)


def test_a_speed_only_config_apart_from_the_winner_is_offered_as_an_export_of_its_own():
    """The winner shortens the prompts; the speed-only line names a faster config than the user's
    own that keeps them, and says how to write it. Where the speed-only config is the user's own
    run, there is nothing to write."""
    from nccl_tune.reporting.terminal import print_summary
    from nccl_tune.tuner.records.semantics import study_reference
    from nccl_tune.tuner.records.stability import candidates, select_winner, speed_only
    from tests.tuner.records.test_honest_winners import BASE, MICRO, PROMPT, SPACE
    from tests.tuner.records.test_honest_winners import rec as run

    speedy, prompt = {**BASE, MICRO: 4}, {**BASE, MICRO: 4, PROMPT: 2048}
    records = [run(0, BASE, step_s=14.0, kind=TrialKind.BASELINE), run(1, speedy, step_s=12.0)]
    records += [run(2, prompt, step_s=9.0), run(3, prompt, step_s=9.0, kind=TrialKind.RERUN)]
    records += [run(4, speedy, step_s=12.1, kind=TrialKind.RERUN)]

    def summary(recs: list[TrialRecord]) -> str:
        ref = study_reference(SPACE, recs)
        win = select_winner(recs, require_confirmation=True, semantic_ref=ref)
        base = next(c for c in candidates(recs) if c.is_baseline)
        buf = io.StringIO()
        print_summary(Console(file=buf, width=200), SPACE, recs, win, base, speed_only=speed_only(recs, True, ref))
        return buf.getvalue()

    hint = "  write it as tuned YAML: nccl-tune export --speed-only"
    text = summary(records)
    assert re.search(r"speed only \(the training as you run it\): trial 1, .*\n" + re.escape(hint), text), text
    own = [records[0], run(5, BASE, step_s=14.0, kind=TrialKind.RERUN), *records[2:4]]
    text = summary(own)
    assert "speed only (the training as you run it): trial 0" in text and hint not in text, text


def test_a_failure_s_advice_names_the_values_only_failed_runs_held(tmp_path):
    """NCCL_ALGO=Tree hangs the tiny trainer's first step (at this micro-batch); Ring and the
    baseline finish: the run's line and the report's advice for the hang lead with the one value
    only it held."""
    pins = ["--set", "trainer.offload=false", "--set", "trainer.micro=2"]
    args = ["run", "--space", str(TINY_SPACE), "--study", "t", "--seed", "3", "--trials", "3", "--confirm", "0", *pins]
    env = {"TINY_FLAKY_ALGO": "Tree"}
    run = run_cli([*args, "--", sys.executable, str(TINY_TRAINER)], cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    out = (run.stdout + run.stderr).splitlines()
    live = [line for line in out if " hang " in line and line.startswith("trial ")]
    assert live and "advice: only runs that failed held NCCL_ALGO=Tree, the likeliest cause" in live[0], live
    proc = run_cli(["report", "--study", "t", "--json"], cwd=tmp_path)
    rows = {r["params"]["NCCL_ALGO"]: r for r in json.loads(proc.stdout)["trials"]}
    assert rows["Tree"]["status"] == "hang", rows
    assert rows["Tree"]["advice"].startswith("only runs that failed held NCCL_ALGO=Tree, the likeliest cause; ")
    assert rows["Ring"]["status"] == "ok" and rows["unset"]["status"] == "ok"
    piped = run_cli(["report", "--study", "t"], cwd=tmp_path)
    assert "advice: only runs that failed held NCCL_ALGO=Tree" in piped.stdout + piped.stderr
