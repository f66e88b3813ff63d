"""LocalLauncher end to end with real process trees: clocks, teardown, records, classification."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from nccl_tune.errors import GpuGateError, NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.process import build_env
from nccl_tune.trial import OUTSIDE_PHASES, SILENCE_PHASE, STARTUP_PHASE, Clocks, StopReason, StopRule, TrialResult

from .helpers import FAKE_TRAINER, RecordingObserver, wait_for_json, wait_until_marked

MARGIN_S = 4.0  # the suite shares two cores with other suites: generous, and only on upper bounds


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_good_trial_is_measured_stopped_and_recorded(make_spec) -> None:
    spec = make_spec(
        "--steps",
        "100",
        "--step-s",
        "0.3",
        "--ansi",
        "--ray-prefix",
        "--memory",
        "2",
        "--print-env",
        "NCCL_ALGO,NCCL_P2P_DISABLE,TORCH_FR_DUMP_TEMP_FILE",
        params={"micro": 2},
        env={"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": None},
        samples_per_step=1280.0,
    )
    observer = RecordingObserver()
    result = LocalLauncher().run(spec, observer)

    assert result.status is FailureClass.OK and result.stop_reason is StopReason.MEASURED
    assert result.verdict.ok
    assert len(result.step_times_s) >= 3 and len(result.measured_step_times_s) >= 2
    assert all(0.2 <= s < 5 for s in result.step_times_s)
    assert result.throughput_per_s == pytest.approx(1280.0 / result.mean_step_s)
    assert set(result.phase_max_s) == {"generate", "policy_train", "step", STARTUP_PHASE, SILENCE_PHASE}
    assert result.signal_name == "SIGTERM"  # we stopped it once it had measured enough
    assert result.escaped_processes == 0 and result.survivors == 0
    assert result.memory.source == "log"
    assert [g.index for g in result.memory.gpus] == [0, 1]
    assert result.memory.gpus[0].total_gib == pytest.approx(79.65, abs=0.2)
    assert result.memory.peak_rss_gib > 0
    # the memory lines come after the step's inner phases finished, before the step's own line
    assert dict(result.memory.phase_peak_frac) == {"step": pytest.approx(0.781)}  # rank 1: 62.20GiB(78.1%)
    assert result.memory.phases_open_at_end == ("step",)

    # the trial folder: spec before launch, the raw log, the result
    folder = spec.trial_dir
    recorded = json.loads((folder / "spec.json").read_text())
    assert recorded["argv"] == list(spec.argv) and recorded["params"] == {"micro": 2}
    assert recorded["env"]["NCCL_P2P_DISABLE"] is None
    assert TrialResult.from_json(json.loads((folder / "result.json").read_text())) == result
    log = (folder / "output.log").read_text()
    assert f"marker={spec.marker}" in log and "\x1b[36m(skyrl_entrypoint pid=" in log
    assert "env NCCL_ALGO=Ring" in log and "env NCCL_P2P_DISABLE=<unset>" in log
    assert f"env TORCH_FR_DUMP_TEMP_FILE={folder}/fr/nccl_trace_rank_" in log
    assert (folder / "fr").is_dir()
    assert result.log_paths == (folder / "output.log",)

    # the observer saw it all, in order
    assert observer.kinds("start")[0] > 0
    assert [i for i, _ in observer.kinds("step")][:3] == [0, 1, 2]
    assert "generate" in {p for p, _ in observer.kinds("phase")}
    assert observer.kinds("memory") and max(observer.kinds("memory")) == pytest.approx(62.2)
    assert observer.kinds("stopping") == [StopReason.MEASURED]
    assert observer.kinds("end") == [FailureClass.OK]
    assert observer.polls >= 3


def test_steps_read_while_the_trial_is_torn_down_are_not_its_steps(make_spec) -> None:
    # 20 ms steps and a trainer that ignores SIGTERM: dozens of step lines come after the stop
    spec = make_spec("--steps", "400", "--step-s", "0.02", "--no-step-start", "--ignore-term")
    result = LocalLauncher().run(spec)
    assert result.status is FailureClass.OK and result.stop_reason is StopReason.MEASURED
    assert len(result.step_times_s) == 3 and len(result.measured_step_times_s) == 2
    facts = json.loads((spec.trial_dir / "facts.json").read_text())
    assert facts["steps_done"] == 3, facts
    assert sum("step" in line for line in (spec.trial_dir / "output.log").read_text().splitlines()) > 3


def test_a_command_that_exits_after_its_steps_is_ok(make_spec) -> None:
    result = LocalLauncher().run(make_spec("--steps", "3", "--step-s", "0.1"))
    # its last step line and its exit come together: whichever the launcher sees first, the trial is ok
    assert result.status is FailureClass.OK and len(result.step_times_s) == 3
    assert result.stop_reason in (StopReason.EXITED, StopReason.MEASURED)
    if result.stop_reason is StopReason.EXITED:
        assert result.exit_code == 0 and result.signal_name is None


def test_a_hang_is_found_by_the_stall_clock_and_nothing_survives(make_spec, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids.json"
    stall_s, grace_s = 2.0, 1.0
    spec = make_spec(
        "--steps",
        "10",
        "--step-s",
        "0.2",
        "--hang-at-step",
        "1",
        "--detach",
        "2",
        "--ignore-term",
        "--pidfile",
        str(pidfile),
        clocks=Clocks(startup_timeout_s=30, stall_timeout_s=stall_s, stall_floor_s=stall_s, grace_s=grace_s),
    )
    observer = RecordingObserver()
    result = LocalLauncher().run(spec, observer)
    ended = time.monotonic()
    pids = wait_for_json(pidfile)

    assert result.status is FailureClass.HANG and result.stop_reason is StopReason.STALL
    assert observer.kinds("stopping") == [StopReason.STALL]
    assert result.verdict.phase == "generate"
    evidence = [str(e) for e in result.verdict.evidence]
    assert "no progress for" in evidence[0] and "in phase 'generate'" in evidence[0]
    assert any("Started: 'generate'" in e for e in evidence[1:])
    assert len(result.step_times_s) == 1
    # from the last progress line to the end of teardown: the stall timeout, then at most the grace period
    silent = ended - observer.last_time("step", "phase")
    assert stall_s - 0.5 <= silent <= stall_s + grace_s + MARGIN_S
    # the whole tree, including two setsid children that ignore SIGTERM, is gone
    assert result.escaped_processes == 2 and result.survivors == 0
    assert _gone(pids["main"]) and all(_gone(p) for p in pids["detached"])


@pytest.mark.parametrize(
    "known, expected",
    [({"generate": 1.5}, FailureClass.OK), ({}, FailureClass.HANG)],
    ids=["duration-known", "duration-unknown"],
)
def test_a_slow_but_steady_phase_is_not_a_hang_once_its_duration_is_known(make_spec, known, expected) -> None:
    """generate prints nothing for 2 s, twice the plain stall timeout; a study that has seen it
    take 1.5 s allows 3 x 1.5 s of silence."""
    clocks = Clocks(
        startup_timeout_s=30, stall_timeout_s=1.0, stall_floor_s=1.0, stall_multiplier=3, phase_max_s=known, grace_s=1.0
    )
    result = LocalLauncher().run(make_spec("--steps", "3", "--phases", "generate", "--step-s", "2.0", clocks=clocks))
    assert result.status is expected
    if expected is FailureClass.HANG:
        assert result.verdict.phase == "generate" and result.step_times_s == ()


def test_the_startup_deadline(make_spec) -> None:
    clocks = Clocks(startup_timeout_s=1.5, stall_timeout_s=10, grace_s=1.0)
    t0 = time.monotonic()
    result = LocalLauncher().run(make_spec("--startup-s", "60", clocks=clocks))
    assert result.status is FailureClass.HANG and result.stop_reason is StopReason.STARTUP
    assert "start-up deadline of 1.5 s" in str(result.verdict.evidence[0])
    assert "start-up" in result.verdict.advice
    assert time.monotonic() - t0 < 1.5 + 1.0 + MARGIN_S


def test_a_startup_hang_is_stopped_after_a_few_times_the_startups_the_study_measured(make_spec) -> None:
    """The first trial starts in about 0.5 s and the launcher records it; a later trial that never
    prints progress is stopped after 3 x that (at least the 1 s floor), not the 30 s timeout."""
    clocks = Clocks(startup_timeout_s=30, stall_timeout_s=10, stall_floor_s=1.0, stall_multiplier=3, grace_s=1.0)
    first = LocalLauncher().run(make_spec("--startup-s", "0.5", "--steps", "3", clocks=clocks))
    assert first.status is FailureClass.OK
    measured = first.phase_max_s[STARTUP_PHASE]
    assert 0.5 <= measured < 0.5 + MARGIN_S
    learned = clocks.learned(first.phase_max_s)
    t0 = time.monotonic()
    hung = LocalLauncher().run(make_spec("--startup-s", "60", number=1, clocks=learned))
    assert hung.status is FailureClass.HANG and hung.stop_reason is StopReason.STARTUP
    deadline = max(1.0, 3 * measured)
    assert f"start-up deadline of {deadline:.3g} s (3x the longest start-up measured" in str(hung.verdict.evidence[0])
    assert time.monotonic() - t0 < deadline + 1.0 + MARGIN_S


def test_a_hang_between_steps_is_stopped_after_a_few_times_the_waits_the_study_measured(make_spec) -> None:
    """A trainer with no phases prints a step every 0.3 s; a later run of it that stops printing in
    its third step is stopped after 3 x the longest wait measured (at least the 1 s floor), within
    the steps the first run reached, not after the 20 s stall timeout."""
    clocks = Clocks(startup_timeout_s=30, stall_timeout_s=20, stall_floor_s=1.0, stall_multiplier=3, grace_s=1.0)
    plain = ("--steps", "5", "--step-s", "0.3", "--phases", "", "--no-step-start")
    first = LocalLauncher().run(make_spec(*plain, clocks=clocks, stop=StopRule(1, 4)))
    assert first.status is FailureClass.OK and len(first.step_times_s) == 5
    wait = first.phase_max_s[SILENCE_PHASE]
    assert 0.3 <= wait < 0.3 + MARGIN_S
    learned = dataclasses.replace(clocks.learned(first.phase_max_s), silence_steps=len(first.step_times_s))
    spec = make_spec(*plain, "--hang-at-step", "2", number=1, clocks=learned, stop=StopRule(1, 4))
    observer = RecordingObserver()
    hung = LocalLauncher().run(spec, observer)
    ended = time.monotonic()
    assert hung.status is FailureClass.HANG and hung.stop_reason is StopReason.STALL
    assert "longest wait between steps measured" in str(hung.verdict.evidence[0])
    deadline = max(1.0, 3 * max(wait, first.phase_max_s["step"]))
    assert deadline - 0.5 <= ended - observer.last_time("step", "phase") <= deadline + 1.0 + MARGIN_S


def test_the_trial_budget(make_spec) -> None:
    clocks = Clocks(startup_timeout_s=30, stall_timeout_s=10, trial_timeout_s=2.0, grace_s=1.0)
    result = LocalLauncher().run(make_spec("--steps", "100", "--step-s", "1.5", clocks=clocks))
    assert result.status is FailureClass.BUDGET and result.stop_reason is StopReason.BUDGET
    assert result.step_times_s  # it was progressing
    assert "trial budget of 2 s" in str(result.verdict.evidence[0])


def test_an_early_exit_with_code_zero_is_a_crash(make_spec) -> None:
    result = LocalLauncher().run(make_spec("--steps", "1", "--step-s", "0.1", "--no-done"))
    assert result.status is FailureClass.CRASH and result.exit_code == 0
    assert "exited with code 0 after 1 of 3 steps" in str(result.verdict.evidence[0])


def test_training_that_ends_by_itself_before_the_measured_steps_is_a_config_error(make_spec) -> None:
    """skyrl_train with a train batch larger than the data: 'Training done!' after fewer steps."""
    result = LocalLauncher().run(make_spec("--steps", "1", "--step-s", "0.1"))
    assert result.status is FailureClass.CONFIG_ERROR and result.exit_code == 0
    assert "training finished by itself after 1 of 3 steps" in str(result.verdict.evidence[0])
    assert "batch" in result.verdict.advice


def test_an_exit_code_goes_through_the_classifier(make_spec) -> None:
    result = LocalLauncher().run(make_spec("--steps", "5", "--step-s", "0.1", "--crash-at-step", "1"))
    assert result.status is FailureClass.CRASH and result.exit_code == 1
    assert any("RuntimeError: something broke" in e.text for e in result.verdict.evidence)


def test_an_oom_is_classified_and_flight_recorder_dumps_are_referenced(make_spec) -> None:
    spec = make_spec("--steps", "5", "--step-s", "0.1", "--oom-at-step", "1", "--fr-dump")
    result = LocalLauncher().run(spec)
    assert result.status is FailureClass.OOM and result.exit_code == 1
    assert result.fr_dumps == (spec.trial_dir / "fr" / "nccl_trace_rank_0", spec.trial_dir / "fr" / "nccl_trace_rank_1")
    assert json.loads((spec.trial_dir / "result.json").read_text())["fr_dumps"] == [str(p) for p in result.fr_dumps]


def test_a_root_cause_in_the_log_wins_over_a_stall(make_spec) -> None:
    """One rank hit an OOM and the others wait in a collective: the stall clock fires, the log says why."""
    clocks = Clocks(startup_timeout_s=30, stall_timeout_s=1.5, stall_floor_s=1.5, grace_s=1.0)
    result = LocalLauncher().run(
        make_spec("--steps", "5", "--step-s", "0.1", "--oom-at-step", "1", "--oom-then-hang", clocks=clocks)
    )
    assert result.stop_reason is StopReason.STALL
    assert result.status is FailureClass.OOM
    assert any("CUDA out of memory" in e.text for e in result.verdict.evidence)


def test_command_not_found_inside_the_command(make_spec) -> None:
    spec = make_spec(argv=["bash", "-c", "echo starting; no_such_program_xyz --config a.yaml"])
    result = LocalLauncher().run(spec)
    assert result.exit_code == 127
    assert result.status is FailureClass.CONFIG_ERROR
    assert any("command not found" in e.text for e in result.verdict.evidence)


def test_a_missing_command_is_refused_before_the_study_and_recorded_if_run(make_spec, tmp_path: Path) -> None:
    spec = make_spec(argv=[str(tmp_path / "nope.sh"), "x=1"])
    launcher = LocalLauncher()
    with pytest.raises(NcclTuneError, match="nope.sh' not found"):
        launcher.prepare(spec)
    result = launcher.run(spec)  # never raises once asked to run
    assert result.status is FailureClass.CONFIG_ERROR and result.stop_reason is StopReason.LAUNCH_ERROR
    assert (spec.trial_dir / "result.json").exists()


def test_an_nccl_info_flood_is_logged_whole_and_does_not_disturb_progress(make_spec) -> None:
    spec = make_spec("--steps", "3", "--step-s", "0.1", "--flood", "20000")
    result = LocalLauncher().run(spec)
    assert result.status is FailureClass.OK and len(result.step_times_s) == 3
    log = spec.trial_dir / "output.log"
    with open(log, "rb") as fh:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    assert lines > 3 * 2 * 20000
    assert log.stat().st_size > 3 * 2 * 20000 * 100


@pytest.mark.parametrize(
    "answer, status, reason",
    [
        (StopReason.EARLY_STOP, FailureClass.BUDGET, StopReason.EARLY_STOP),
        (StopReason.INTERRUPTED, FailureClass.INTERRUPTED, StopReason.INTERRUPTED),
    ],
)
def test_the_observer_can_stop_a_trial(make_spec, answer, status, reason) -> None:
    observer = RecordingObserver(stop_after_steps=1, answer=answer)
    result = LocalLauncher().run(make_spec("--steps", "100", "--step-s", "0.2", "--detach", "1"), observer)
    assert result.status is status and result.stop_reason is reason
    assert result.escaped_processes == 1 and result.survivors == 0
    assert observer.last_progress.step_times_s and observer.last_progress.elapsed_s > 0


def test_a_keyboard_interrupt_inside_run_tears_down_records_and_is_re_raised(make_spec) -> None:
    spec = make_spec("--steps", "100", "--step-s", "0.2", "--detach", "1")
    with pytest.raises(KeyboardInterrupt):
        # once a step is done: its detached child was spawned before the first step (on a loaded
        # machine the fifth poll may come before the trainer has started at all)
        LocalLauncher().run(spec, RecordingObserver(raise_on_poll=5, raise_after_steps=1))
    recorded = TrialResult.from_json(json.loads((spec.trial_dir / "result.json").read_text()))
    assert recorded.status is FailureClass.INTERRUPTED and recorded.survivors == 0
    assert recorded.escaped_processes == 1


def test_gpu_memory_is_sampled_and_the_gate_opens_once_the_holders_are_dead(make_spec, fake_gpus) -> None:
    """The trainer and a detached worker that ignores SIGTERM hold 40 GiB each (fake NVML)."""
    state_path, probe = fake_gpus
    launcher = LocalLauncher(probe=probe, gate_timeout_s=10, memory_interval_s=0.1)
    launcher.before_study()
    spec = make_spec(
        "--steps", "100", "--step-s", "0.3", "--detach", "1", "--gpu-state", str(state_path), "--gpu-gib", "40"
    )
    result = launcher.run(spec)
    assert result.status is FailureClass.OK
    assert result.memory.source == "nvml"
    assert [g.peak_gib for g in result.memory.gpus] == [pytest.approx(40.5, abs=0.01)] * 2
    assert all(g.baseline_gib == pytest.approx(0.5) for g in result.memory.gpus)
    # the memory is held before the first phase line: every phase sampled saw all of it
    phases = dict(result.memory.phase_peak_frac)
    assert set(phases) - {OUTSIDE_PHASES} and set(phases) <= {OUTSIDE_PHASES, "step", "generate", "policy_train"}
    assert all(
        frac == pytest.approx(40.5 / 79.65, abs=1e-3) for phase, frac in phases.items() if phase != OUTSIDE_PHASES
    )
    assert result.memory.phases_open_at_end in {
        (OUTSIDE_PHASES,),
        ("step",),
        ("step", "generate"),
        ("step", "policy_train"),
    }
    assert result.escaped_processes == 1
    t0 = time.monotonic()
    launcher.gate()
    assert time.monotonic() - t0 < 2.0


def test_the_gate_stays_shut_while_a_process_of_the_study_lives(make_spec, study: str) -> None:
    spec = make_spec("--steps", "3")
    launcher = LocalLauncher(gate_timeout_s=0.5)
    launcher.prepare(spec)
    leftover = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env=build_env({}, f"{study}/7"), start_new_session=True
    )
    try:
        wait_until_marked(study, leftover.pid)
        with pytest.raises(GpuGateError, match=f"pid {leftover.pid} .*trial {study}/7"):
            launcher.gate()
        assert launcher.reap(study) and leftover.wait(10) is not None
        launcher.gate()
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()


def test_an_unwritable_trial_folder_is_one_clear_error(make_spec, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the results folder should be")
    spec = replace(make_spec("--steps", "3"), trial_dir=blocker / "trial-0")
    with pytest.raises(
        NcclTuneError, match=r"cannot write the trial folder .*not-a-dir/trial-0 .*choose another --results"
    ):
        LocalLauncher().run(spec)


class _SigtermTorchrunAtFirstStep(RecordingObserver):
    """Sends SIGTERM to the trial's top process (torchrun's agent) once a step is done, as a scheduler would."""

    def on_start(self, spec, pid):
        super().on_start(spec, pid)
        self.pid = pid

    def on_step(self, spec, step_index, seconds):
        super().on_step(spec, step_index, seconds)
        if step_index == 0:
            os.kill(self.pid, signal.SIGTERM)


def test_a_sigterm_sent_to_a_real_torchrun_from_outside_is_a_failure_no_value_brought_about(make_spec) -> None:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=1",
        str(FAKE_TRAINER),
        "--steps",
        "100",
        "--step-s",
        "0.2",
    ]
    spec = make_spec(argv=argv, clocks=Clocks(startup_timeout_s=90, stall_timeout_s=30, grace_s=2.0))
    result = LocalLauncher().run(spec, _SigtermTorchrunAtFirstStep())
    assert result.status is FailureClass.CRASH and result.verdict.cause.subtype == "outside_signal", result.verdict
    assert result.verdict.from_outside and "SIGTERM from outside" in result.verdict.advice
    assert result.survivors == 0
