"""The NCCL sweep in a study: once the baseline has finished, each single NCCL change is timed on
the collectives alone, the search tries the faster ones first, and a tuner stopped mid-sweep
resumes it where it stopped."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from io import StringIO
from pathlib import Path

import optuna
from rich.console import Console

from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.nccl_check import CheckingLauncher
from nccl_tune.reporting.json_report import report_json
from nccl_tune.reporting.markdown import render_markdown
from nccl_tune.reporting.view import load_view
from nccl_tune.trial import TrialSpec
from nccl_tune.tuner.records.nccl_sweep import NUMBER_BASE, entries
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.dry_run import plan_dry_run
from nccl_tune.tuner.study.loop import run_study
from tests.tuner.conftest import TINY_SPACE
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

SPACE = """
name: sweep
parameters:
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128], default: unset, memory: none}
  - {name: NCCL_MIN_NCHANNELS, kind: categorical, choices: [unset, 16, 32], default: unset, memory: none}
stop: {warmup_steps: 1, measured_steps: 3}
throughput: {samples_per_step: 100}
"""
SWEPT = 3 + 2 + 2
"""Single changes from the baseline."""


def truth(v) -> Truth:
    """NVLS makes the collectives 1.4x as fast, and the step, which waits on them for a third of its
    time, 10% faster; nothing else changes either."""
    nvls = v["NCCL_ALGO"] == "NVLS"
    return Truth(9.0 if nvls else 10.0, 40.0, check_time_factor=1 / 1.4 if nvls else 1.0)


class Launcher(ModelLauncher):
    """The modelled node; sends the tuner SIGINT as the sweep's check number ``interrupt_at`` starts."""

    def __init__(self, interrupt_at: int | None = None, startup_s: float = 300.0, step_scale: float = 1.0) -> None:
        def scaled(v) -> Truth:
            t = truth(v)
            return Truth(t.step_s * step_scale, t.peak_gib, check_time_factor=t.check_time_factor)

        cost = analytic_cost(scaled, AnalyticNode(startup_s=startup_s, step_noise=0.005, run_noise=0.005))
        super().__init__(env={}, cost=cost, nccl_check_gpus=8)
        self.interrupt_at = interrupt_at
        self.sweep_checks: list[int] = []

    def run(self, spec: TrialSpec, observer=None):
        if spec.nccl_check and spec.number >= NUMBER_BASE:
            self.sweep_checks.append(spec.number - NUMBER_BASE)
            if spec.number - NUMBER_BASE == self.interrupt_at:
                os.kill(os.getpid(), signal.SIGINT)
        return super().run(spec, observer)


def study(tmp_path: Path, trials: int, launcher: Launcher):
    (tmp_path / "sweep.yaml").write_text(SPACE)
    out = StringIO()
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "sweep.yaml"),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/sweep.db",
        study="sweep",
        trials=trials,
        seed=0,
        confirm=0,
    )
    result = run_study(settings, console=Console(file=out, width=200), launcher=launcher)
    return result, out.getvalue()


def test_the_sweep_times_each_change_once_and_the_search_tries_the_faster_collectives_first(tmp_path):
    launcher = Launcher()
    result, shown = study(tmp_path, 2, launcher)
    assert launcher.sweep_checks == list(range(SWEPT + 1)), "the baseline's values, then each change once"
    speed = re.search(r"NCCL sweep: NCCL_ALGO=NVLS: a round in [\d.]+ ms, ([\d.]+)x the baseline's speed", shown)
    assert speed and 1.3 <= float(speed.group(1)) <= 1.5, shown
    assert "NCCL sweep: NCCL_PROTO=Simple: a round in" in shown and "within noise of the baseline's" in shown
    first_move = sorted(result.records, key=lambda r: r.number)[1]
    assert first_move.values["NCCL_ALGO"] == "NVLS", f"the first search trial: {first_move.values}, {first_move.why}"
    assert result.records[0].result.nccl_check_s > 0 and first_move.result.nccl_check_s == 0, (
        "the baseline's values were checked before its trial; NVLS's passed in the sweep"
    )
    again = Launcher()
    _, shown = study(tmp_path, 1, again)
    assert again.sweep_checks == [] and "NCCL sweep" not in shown, "a resumed study does not sweep again"


class Timed(Launcher):
    """Each run takes ``hold_s`` of real time; when each ran, and whether it was a check of the sweep."""

    def __init__(self, hold_s: float, interrupt_at: int | None = None) -> None:
        super().__init__(interrupt_at=interrupt_at)
        self.hold_s = hold_s
        self.spans: list[tuple[int | None, float, float]] = []
        """(sweep check's index or None for a trial's run, start, end)."""
        self.trial_starts: dict[int, float] = {}
        """When each trial's first run (its own check, or the trial) started."""
        self._lock = threading.Lock()

    def run(self, spec: TrialSpec, observer=None):
        start = time.monotonic()
        time.sleep(self.hold_s)
        result = super().run(spec, observer)
        index = spec.number - NUMBER_BASE if spec.nccl_check and spec.number >= NUMBER_BASE else None
        with self._lock:
            self.spans.append((index, start, time.monotonic()))
            if index is None:
                self.trial_starts[spec.number] = min(start, self.trial_starts.get(spec.number, start))
        return result


def parallel_study(tmp_path: Path, launcher: Launcher, trials: int = 3):
    (tmp_path / "sweep.yaml").write_text(SPACE)
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "sweep.yaml"),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/sweep.db",
        study="sweep",
        trials=trials,
        seed=0,
        confirm=0,
        launcher="ray",
        parallel=2,
    )  # the modelled node stands in for the cluster
    out = StringIO()
    return run_study(settings, console=Console(file=out, width=200), launcher=launcher), out


def test_with_parallel_slots_the_baseline_s_check_runs_alone_then_the_changes_side_by_side_before_new_trials(tmp_path):
    launcher = Timed(hold_s=0.3)
    result, out = parallel_study(tmp_path, launcher)
    checks = sorted((i, a, b) for i, a, b in launcher.spans if i is not None)
    assert [i for i, _, _ in checks] == list(range(SWEPT + 1)), "every check of the sweep, once"
    base = checks[0]
    assert all(a >= base[2] for _, a, _ in checks[1:]), "the baseline's check alone, first"
    changes = checks[1:]
    assert any(a2 < b1 for (_, a1, b1), (_, a2, _) in zip(changes, changes[1:])), "two changes timed side by side"
    runs = [a for i, a, _ in launcher.spans if i is None]  # trials, and their own checks
    started = launcher.trial_starts.values()  # a trial in flight may go on to its run: it started before
    assert not [a for a in started if base[1] <= a <= checks[-1][2]], "no trial starts while the sweep runs"
    assert [a for a in runs if a > checks[-1][2]], "the search goes on after it"
    assert out.getvalue().count("NCCL sweep: NCCL_") == SWEPT
    launched = sorted((r for r in result.records if r.result), key=lambda r: r.number)
    assert len(launched) == 3 and launched[2].values["NCCL_ALGO"] == "NVLS", (
        "trials 0 and 1 filled the two slots at the start; the first asked after the sweep read it"
    )


def test_with_parallel_slots_a_tuner_interrupted_in_the_sweep_resumes_it_where_it_stopped(tmp_path):
    first = Timed(hold_s=0.2, interrupt_at=3)
    result, _ = parallel_study(tmp_path, first)
    assert result.interrupted and 3 in first.sweep_checks
    storage = f"sqlite:///{tmp_path}/sweep.db"
    stored = entries(optuna.load_study(study_name="sweep", storage=storage))
    assert "baseline" in stored and len(stored) < SWEPT + 1, "the sweep stopped part-way, its checks so far stored"
    again = Timed(hold_s=0.2)
    result, _ = parallel_study(tmp_path, again)
    assert not result.interrupted and 0 not in again.sweep_checks
    assert len(again.sweep_checks) == SWEPT + 1 - len(stored), "only the checks the interrupted run did not store"
    assert len(entries(optuna.load_study(study_name="sweep", storage=storage))) == SWEPT + 1


def test_a_tuner_interrupted_in_the_sweep_resumes_it_where_it_stopped(tmp_path):
    launcher = Launcher(interrupt_at=3)
    result, _ = study(tmp_path, 3, launcher)
    assert result.interrupted and launcher.sweep_checks == [0, 1, 2, 3]
    assert [r.number for r in result.records if r.result] == [0], "no search trial started"
    again = Launcher()
    result, shown = study(tmp_path, 1, again)
    assert again.sweep_checks == list(range(3, SWEPT + 1)), "the checks stored before the interrupt are not run again"
    assert not result.interrupted and len([r for r in result.records if r.result]) == 2


def test_a_dry_run_says_what_the_sweep_will_time_and_only_where_it_will_run(tmp_path):
    (tmp_path / "sweep.yaml").write_text(SPACE)

    def plan(**extra):
        settings = RunSettings(
            command=("true",),
            space=str(tmp_path / "sweep.yaml"),
            results=tmp_path / "results",
            storage=f"sqlite:///{tmp_path}/sweep.db",
            study="sweep",
            **extra,
        )
        return plan_dry_run(settings, Launcher())

    line = plan().nccl_sweep
    assert line is not None and f"{SWEPT} single NCCL changes from the baseline" in line and line in plan().lines()
    assert plan(sampler="tpe").nccl_sweep is None, "TPE does not read it"
    assert plan(nccl_check="off").nccl_sweep is None
    assert plan(pins=(("NCCL_ALGO", "Ring"),)).nccl_sweep.startswith("NCCL sweep, once a trial has finished: 4 single")
    assert not (tmp_path / "results").exists()


def test_the_report_shows_what_each_check_of_the_sweep_timed(tmp_path):
    study(tmp_path, 2, Launcher())
    view = load_view(f"sqlite:///{tmp_path}/sweep.db", "sweep")
    data = report_json(view)
    changes = [line["change"] for line in data["nccl_sweep"]]
    assert changes[0] == "baseline" and len(changes) == SWEPT + 1 and "NCCL_ALGO=NVLS" in changes
    nvls = next(line for line in data["nccl_sweep"] if line["change"] == "NCCL_ALGO=NVLS")
    assert nvls["status"] == "ok" and 1.3 <= nvls["speed"] <= 1.5
    md = render_markdown(view)
    assert "### NCCL sweep" in md and re.search(r"\| NCCL_ALGO=NVLS \| ok \| [\d.]+ \| 1\.[345]\dx \|", md), md
    assert re.search(r"\| NCCL_PROTO=Simple \| ok \| [\d.]+ \| within noise \|", md), md


def test_on_real_processes_the_sweep_runs_the_check_s_ranks_for_each_change_and_its_trials_skip_their_checks(
    tmp_path, tiny_command
):
    """The tiny trainer's study with the real check (two ranks on gloo under ``torch.distributed.run``):
    the sweep's checks run and time their rounds, and a trial whose NCCL values passed in the sweep
    starts without checking them again."""
    settings = RunSettings(
        command=tuple(tiny_command),
        space=str(TINY_SPACE),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/real.db",
        study="real",
        trials=3,
        seed=3,
        confirm=0,
        nccl_check="off",
    )
    checker = CheckingLauncher(LocalLauncher(), gpus=2, backend="gloo", startup_timeout_s=60)
    out = StringIO()
    result = run_study(settings, console=Console(file=out, width=200), launcher=checker)
    shown = out.getvalue()
    lines = [line for line in report_json(load_view(settings.storage_url, "real"))["nccl_sweep"]]
    assert [line["change"] for line in lines] == ["baseline", "NCCL_ALGO=Ring", "NCCL_ALGO=Tree"], shown
    assert all(line["status"] == "ok" and line["round_ms"] > 0 for line in lines), lines
    logs = sorted((tmp_path / "results" / "real" / "nccl-sweep").glob("*/nccl-check/output.log"))
    assert len(logs) == 3 and all("nccl-tune check: round 6/6" in log.read_text() for log in logs)
    launched = sorted((r for r in result.records if r.result), key=lambda r: r.number)
    assert launched[0].result.nccl_check_s > 0, "the baseline's trial checked its values before the sweep"
    assert all(r.result.nccl_check_s == 0 for r in launched[1:]), "every later set passed in the sweep"


def test_the_sweep_stops_where_the_budget_leaves_no_search_trial_and_the_next_run_resumes_it(tmp_path):
    """The budget runs out by the wall clock while the launcher sleeps through the sweep's third
    check (trials of about a modelled second: the reserve for one is small); the run stops before
    the fourth check, and the next run sweeps the rest."""

    class Slow(Launcher):
        def run(self, spec, observer=None):
            if spec.nccl_check and spec.number == NUMBER_BASE + 2:
                time.sleep(5.0)
            return super().run(spec, observer)

    (tmp_path / "sweep.yaml").write_text(SPACE)
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "sweep.yaml"),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/sweep.db",
        study="sweep",
        trials=3,
        seed=0,
        confirm=0,
        budget_s=10.0,
    )
    first = Slow(startup_s=0.5, step_scale=0.01)
    out = StringIO()
    run_study(settings, console=Console(file=out, width=200), launcher=first)
    done = len(first.sweep_checks)
    assert 1 <= done <= 3 and first.sweep_checks == list(range(done)), out.getvalue()  # 3 unless the machine crawls
    assert "--budget" in out.getvalue()
    again = Launcher()
    study(tmp_path, 2, again)
    assert again.sweep_checks == list(range(done, SWEPT + 1))


def test_with_every_nccl_variable_held_there_is_nothing_to_sweep(tmp_path):
    (tmp_path / "sweep.yaml").write_text(SPACE)
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "sweep.yaml"),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/sweep.db",
        study="sweep",
        trials=2,
        seed=0,
        confirm=0,
        pins=(("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "unset"), ("NCCL_MIN_NCHANNELS", "16")),
    )
    launcher = Launcher()
    out = StringIO()
    run_study(settings, console=Console(file=out, width=200), launcher=launcher)
    assert launcher.sweep_checks == [] and "NCCL sweep" not in out.getvalue()
