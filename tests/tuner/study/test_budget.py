"""--budget keeps room for the confirmation re-runs; when they could not run, the best config is
still written, marked unconfirmed, and the run says where. Through the CLI, with the twin."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml
from rich.console import Console

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.study.budget import Budget, Gate
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from tests.tuner.conftest import TWIN_PINS_SPEED_ONLY, run_twin, twin_space_unjudged

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_search_stops_early_enough_for_the_confirmation_to_run(workdir):
    # offload and NCCL pinned: every trial takes about as long as the others, so the plan holds
    # and the worst case not judged: a prediction from a few steps once set the re-run config aside
    pins = TWIN_PINS_SPEED_ONLY[4:]
    assert not any("micro" in p for p in pins)
    space = workdir / "space.yaml"
    space.write_text(twin_space_unjudged())
    args = ["--space", str(space), "--trials", "50", "--budget", "30s", "--confirm", "1", "--json", "-o", "tuned.yaml"]
    proc = run_twin([*args, *pins], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "too little for one more trial and 1 confirmation re-run(s)" in proc.stderr
    assert "no new search trial" in proc.stderr
    rows = json.loads(proc.stdout)["trials"]
    assert [r["kind"] for r in rows if r["outcome"] == "launched"][-1] == "rerun"
    assert yaml.safe_load((workdir / "tuned.yaml").read_text())["metrics"]["confirmed"] is True


def test_a_budget_too_short_for_any_rerun_still_writes_the_best_config_marked_unconfirmed(workdir):
    proc = run_twin(["--trials", "5", "--budget", "1s", "--json", "-o", "tuned.yaml"], cwd=workdir)
    assert proc.returncode == 2, proc.stderr  # not proven stable
    summary = json.loads(proc.stdout)
    assert summary["best"]["trial"] == 0 and summary["best"]["confirmed"] is False
    doc = yaml.safe_load((workdir / "tuned.yaml").read_text())
    assert doc["metrics"]["confirmed"] is False and doc["study"]["trial"] == 0
    assert "NOT confirmed by a re-run" in (workdir / "tuned.yaml").read_text().splitlines()[0]
    assert "the run's --budget is spent: no confirmation re-run" in proc.stderr
    assert (
        "tuned.yaml holds the fastest stable one (trial 0), marked unconfirmed (metrics.confirmed: false)"
        in proc.stderr
    )


@pytest.mark.parametrize("left_s", [5.0, 25.0, 30.5, 35.0, 55.0, 61.0])
def test_the_search_trials_the_budget_has_time_for_are_those_that_would_start(left_s):
    # longest ok trial 10 s, two re-runs kept: a search trial starts while more than 30 s are left
    budget = Budget(100.0, confirm_runs=2, now=time.monotonic() - (100.0 - left_s))
    assert budget.search_trials_left() is None  # nothing timed yet
    budget.longest_ok_s = 10.0
    started, t = 0, left_s
    while t > budget.reserve_s:
        started, t = started + 1, t - budget.longest_ok_s
    assert budget.search_trials_left() == started
    assert (started == 0) == budget.search_over()
    assert Budget(None, confirm_runs=2).search_trials_left() is None


def test_the_search_trials_left_go_at_the_runs_own_pace():
    # 60 s gone on 3 search trials of 10 s: forced runs and the time between trials took the rest,
    # so each search trial costs 20 s of the 70 s left beyond the 30 s kept for the re-runs
    budget = Budget(130.0, confirm_runs=2, now=time.monotonic() - 60.0)
    budget.longest_ok_s = 10.0
    assert budget.search_trials_left(launched=3) == 2
    assert budget.search_trials_left(launched=12) == 4  # a pace below a trial's own time is not believed


def test_a_forced_run_is_kept_time_for_at_its_own_length():
    # the space forces the longest batch: the reserve keeps the forced run after the search too, at
    # the longest a forced run took (out of memory or not), at least a normal trial's length
    budget = Budget(600.0, confirm_runs=2, forced_runs=1)
    budget.observe(_ended(FailureClass.OK, 10.0))
    assert budget.reserve_s == 3 * 10.0 + 10.0
    budget.observe(_ended(FailureClass.OOM, 25.0), forced=True)
    assert budget.longest_ok_s == 10.0 and budget.reserve_s == 3 * 10.0 + 25.0
    budget.observe(_ended(FailureClass.OOM, 40.0))  # a normal trial that failed says nothing of either
    assert budget.reserve_s == 55.0
    assert "and a forced run of about 0.4 min: no new search trial" in budget.note()
    assert Budget(600.0, confirm_runs=2).reserve_s == 0.0  # nothing timed yet: the first trial starts


def test_forced_runs_that_failed_keep_time_for_the_chain_they_start_after_the_search():
    # a forced run that fails sends the next-best config to its own: where the study's forced runs
    # failed, the search leaves time for the chain they make, not for one run
    budget = Budget(600.0, confirm_runs=2, forced_runs=1)
    budget.observe(_ended(FailureClass.OK, 10.0))
    budget.observe(_ended(FailureClass.OOM, 20.0), forced=True, unstable=True)
    assert budget.forced_chain == 2.0 and budget.reserve_s == 3 * 10.0 + 2 * 20.0
    budget.observe(_ended(FailureClass.OOM, 20.0), forced=True, unstable=True)
    assert budget.forced_chain == pytest.approx(3.0)
    assert "and 3 forced runs of about 0.3 min each: no new search trial" in budget.note()
    budget.observe(_ended(FailureClass.OK, 20.0), forced=True)  # one fitted: the chain shortens
    assert budget.forced_chain == pytest.approx(2.0)  # 2 of 3 failed, counted with one more that fitted
    assert Budget(600.0, confirm_runs=2).forced_chain == 0.0  # nothing forced in this space


def test_a_run_after_the_search_starts_until_the_deadline_or_a_stop_signal():
    console = Console(record=True, width=200)
    display = Display(console, load_space("skyrl-text2sql"))
    with InterruptFlag() as interrupt:
        assert Budget(60.0, confirm_runs=2).gate(interrupt, display, "no re-run") is Gate.GO
        over = Budget(60.0, confirm_runs=2, now=time.monotonic() - 61.0)
        assert over.gate(interrupt, display, "no re-run") is Gate.SPENT
        assert "the run's --budget is spent: no re-run" in console.export_text()
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupt.is_set
        assert over.gate(interrupt, display, "no re-run") is Gate.INTERRUPTED  # a stop signal comes first
        assert Budget(None, confirm_runs=2).gate(interrupt, display, "no re-run") is Gate.INTERRUPTED


def _ended(status: FailureClass, wall_s: float) -> TrialResult:
    return TrialResult(number=0, status=status, verdict=Verdict(status), stop_reason=StopReason.EXITED, wall_s=wall_s)
