"""``LocalLauncher``: one trial as a process tree on this machine, supervised to its end.

A run: write ``spec.json``; start the command in a new session with the trial's marker and the
Flight Recorder dump path in its env; stream its output to ``output.log`` through the progress
parser; sample memory; watch the three clocks and the observer; tear it down (process group,
then every marked process); collect Flight Recorder dumps; classify; write ``result.json``.

Interrupts: the tuner's observer returns ``StopReason.INTERRUPTED`` from ``should_stop`` and gets an
``interrupted`` result back. A ``KeyboardInterrupt`` (or any other exception) raised inside
``run`` is not swallowed: the trial is torn down, ``result.json`` records it as ``interrupted``,
and the exception is re-raised. SIGINT/SIGTERM arriving during teardown are held until teardown
has finished, so a second Ctrl-C cannot leave processes behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from nccl_tune.diagnose.logfiles import source_name, trial_log_files
from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, decide
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import Cause, Evidence, FailureClass, Verdict, split_returncode
from nccl_tune.gpu import FAKE_NVML_ENV, GpuProbe, open_probe
from nccl_tune.launchers import private_ray
from nccl_tune.launchers.base import CheckSupport, Launcher, TrialObserver, TrialProgress
from nccl_tune.launchers.fr import clear_dumps, collect_dumps, fr_env, fr_prefix
from nccl_tune.launchers.gate import GpuGate
from nccl_tune.launchers.logstream import LineScanner, LogPump
from nccl_tune.launchers.memory import MemorySampler, build_report
from nccl_tune.launchers.nccl_check import nccl_unusable, visible_gpus
from nccl_tune.launchers.process import build_env, resolve_command, spawn, tuner_alive
from nccl_tune.launchers.progress import ProgressEvent, ProgressTracker, compile_rules, rules_hint
from nccl_tune.launchers.stacks import collect_stacks
from nccl_tune.launchers.supervise import Decision, Watch, observer_decision
from nccl_tune.launchers.teardown import TeardownReport, become_subreaper, kill_marked, study_match, terminate
from nccl_tune.launchers.trial_files import LOG_FILE, write_facts, write_result, write_spec
from nccl_tune.launchers.trial_logs import count_lines, scan_trial_logs
from nccl_tune.presets import apply_preset
from nccl_tune.trial import StopReason, TrialResult, TrialSpec

REAP_GRACE_S = 5.0


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while the body runs (main thread only), then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, lambda s, _f: pending.append(s))
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def _analyse(dumps: tuple[Path, ...]):  # noqa: ANN202 - FlightRecorderSummary | None
    """The Flight Recorder analysis of the dumps the trial left (None without any)."""
    if not dumps:
        return None
    from nccl_tune.diagnose.flight_recorder import analyse_dumps

    return analyse_dumps(list(dumps))


def _effective_env(overlay: Mapping[str, str | None]) -> dict[str, str]:
    """The tuner's environment with the trial's overlay applied (None removes a variable)."""
    env = dict(os.environ)
    for key, value in overlay.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class LocalLauncher(Launcher):
    """Runs each trial as a local process tree. One instance serves a whole study."""

    name = "local"

    def __init__(
        self,
        *,
        probe: GpuProbe | None = None,
        gate_timeout_s: float = 60.0,
        gate_tolerance_gib: float = 1.0,
        poll_s: float = 0.1,
        memory_interval_s: float = 0.5,
        tail_lines: int = 50,
        stack_timeout_s: float = 5.0,
    ) -> None:
        self._probe = probe
        self._gate_timeout_s = gate_timeout_s
        self._gate_tolerance_gib = gate_tolerance_gib
        self._gate: GpuGate | None = None
        self.poll_s = poll_s
        self.memory_interval_s = memory_interval_s
        self.tail_lines = tail_lines
        self.stack_timeout_s = stack_timeout_s
        self._study: str | None = None
        self._started_at: dict[int, float] = {}
        """The start (``time.time()``) of each running trial, by its leader's pid."""

    # -- set-up ---------------------------------------------------------------------------------

    @property
    def probe(self) -> GpuProbe:
        """The GPU probe (opened on first use: NVML, the fake NVML in tests, or none)."""
        if self._probe is None:
            self._probe = open_probe()
        return self._probe

    def nccl_check_support(self) -> CheckSupport:
        """The GPUs NVML sees on this machine, as many as this environment's ``CUDA_VISIBLE_DEVICES``
        shows (the trials inherit it), if this Python's torch can run NCCL on them (not under the
        tests' fake NVML, which has no GPU behind it)."""
        if os.environ.get(FAKE_NVML_ENV) or not self.probe.available:
            return CheckSupport(
                None, "no GPU visible through NVML" + (f": {self.probe.reason}" if self.probe.reason else "")
            )
        gpus = visible_gpus(len(self.probe.devices()), os.environ.get("CUDA_VISIBLE_DEVICES"))
        why = nccl_unusable() if gpus else "NVML lists no GPU"
        return CheckSupport(None, why) if why else CheckSupport(gpus)

    @property
    def gpu_gate(self) -> GpuGate:
        """The gate between trials (holds the baseline)."""
        if self._gate is None:
            self._gate = GpuGate(self.probe, tolerance_gib=self._gate_tolerance_gib, timeout_s=self._gate_timeout_s)
        return self._gate

    def prepare(self, spec: TrialSpec) -> None:
        """Raise ``NcclTuneError`` (one line) when the command cannot be found or executed, or a
        progress rule does not compile."""
        compile_rules(spec.progress)
        resolve_command(spec.argv, build_env(spec.env, spec.marker), spec.cwd)
        self._study = spec.marker_scope

    def before_study(self) -> None:
        """Take the GPU memory baseline the gate compares against."""
        self.gpu_gate.take_baseline()

    def gate(self) -> None:
        """Wait for a clean node; ``GpuGateError`` names what still holds it."""
        self.gpu_gate.wait(self._study)

    def reap(self, study: str) -> list[str]:
        """Kill every process carrying a marker of ``study`` (SIGTERM, grace, SIGKILL)."""
        return [p.describe() for p in kill_marked(study_match(study), REAP_GRACE_S)]

    def tuner_alive(self, pid: int) -> bool:
        """True when ``pid`` is a live nccl-tune process other than this one."""
        return tuner_alive(pid)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()

    # -- one trial ------------------------------------------------------------------------------

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """Run ``spec`` to its end, tear it down, classify it. Raises ``NcclTuneError`` only
        before anything started (the trial folder cannot be written); once the command runs it
        never raises, except to re-raise an exception raised inside it (see the module docstring)."""
        observer = observer or TrialObserver()
        self._study = spec.marker_scope
        if self.gpu_gate.baseline_gib is None:
            self.gpu_gate.take_baseline()
        trial_dir = spec.trial_dir
        log_path = trial_dir / LOG_FILE
        try:
            trial_dir.mkdir(parents=True, exist_ok=True)
            log_path.write_bytes(b"")
            overlay = fr_env(spec.env, trial_dir)
            overlay.update(self._ray_overlay(spec, overlay))
            private_ray.prepare(overlay)
            clear_dumps(fr_prefix(spec.env, trial_dir))
            write_spec(spec, overlay)
        except OSError as exc:  # nothing started yet: the study cannot record trials at all
            raise NcclTuneError(
                f"cannot write the trial folder {trial_dir} ({exc.strerror or exc}): choose another --results folder"
            ) from None
        t0 = time.monotonic()
        try:
            proc = self._start(spec, overlay)
        except (NcclTuneError, OSError, ValueError) as exc:  # ValueError: an env name exec refuses
            return self._launch_error(spec, observer, str(exc), log_path, t0)

        tracker = ProgressTracker(spec.progress, start_t=t0)
        scanner = LineScanner(tracker.feed, tracker.current_literals, source=LOG_FILE, tail_lines=self.tail_lines)
        assert proc.stdout is not None
        pump = LogPump(proc.stdout.fileno(), log_path, scanner)
        sampler = self._sampler(spec, proc, tracker.open_phases)
        pump.start()
        sampler.start()
        raised: BaseException | None = None
        upto: dict[Path, int] = {}
        """At a stall: the lines each of the trainer's own logs held (what teardown adds does not count)."""
        try:
            observer.on_start(spec, proc.pid)
            decision = self._supervise(spec, proc, tracker, sampler, observer, t0)
            if decision.reason in (
                StopReason.STALL,
                StopReason.STARTUP,
            ):  # what teardown makes them print does not count
                decision = replace(decision, log_lines=scanner.lines)
                upto = {p: count_lines(p) for p in trial_log_files(spec.trial_dir) if p != log_path}
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, an observer's error: tear down first
            raised = exc
            decision = Decision(StopReason.INTERRUPTED, f"interrupted by {type(exc).__name__} {exc}".strip())
        with _signals_held():
            if raised is None:
                try:
                    observer.on_stopping(spec, decision.reason, decision.detail)
                except Exception as exc:  # an observer's error must not stop the teardown
                    raised = exc
            stacks = self._stacks(spec, proc, decision)
            report = self._stop(spec, proc)
            pump.stop()
            proc.stdout.close()
            sampler.stop()
            result = self._result(
                spec, proc, decision, tracker, sampler, report, log_path, t0, pump.error, stacks, upto
            )
            write_result(result, trial_dir)
            private_ray.cleanup(overlay, trial_dir)
        if raised is not None:
            raise raised
        observer.on_end(spec, result)
        return result

    # -- where the command runs (the Ray launcher runs it on a node of its cluster) ---------------

    def _ray_overlay(self, spec: TrialSpec, overlay: Mapping[str, str | None]) -> dict[str, str | None]:
        """A private Ray for the trial's own ``ray.init()`` (``launchers.private_ray``)."""
        return private_ray.trial_ray_env(_effective_env(overlay), spec.trial_dir, spec.marker)

    def _start(self, spec: TrialSpec, overlay: dict[str, str]) -> subprocess.Popen:
        """Start the command in its own session with the trial's env; raises when it cannot."""
        env = build_env(overlay, spec.marker)
        resolve_command(spec.argv, env, spec.cwd)
        become_subreaper()  # orphans of the trial come back to us, not to init: teardown finds them
        started = time.time()
        proc = spawn(spec.argv, env, spec.cwd)
        self._started_at[proc.pid] = started
        return proc

    def _sampler(
        self, spec: TrialSpec, proc: subprocess.Popen, phase_of: Callable[[], tuple[str, ...]]
    ) -> MemorySampler:
        """The memory sampler of the trial (started by ``run``); ``phase_of``: the phases open, from
        the trial's progress tracker, under which each GPU sample counts."""
        return MemorySampler(self.probe, proc.pid, spec.marker, interval_s=self.memory_interval_s, phase_of=phase_of)

    def _stop(self, spec: TrialSpec, proc: subprocess.Popen) -> TeardownReport:
        """Tear the trial down: its process group, every process carrying its marker, and every one
        descending from it (the orphans this process adopted since the trial started)."""
        since = self._started_at.pop(proc.pid, None)
        return terminate(spec.marker, spec.clocks.grace_s, pgid=proc.pid, leader=proc, since=since)

    def _supervise(
        self,
        spec: TrialSpec,
        proc: subprocess.Popen,
        tracker: ProgressTracker,
        sampler: MemorySampler,
        observer: TrialObserver,
        t0: float,
    ) -> Decision:
        watch = Watch(spec.clocks, spec.stop, t0)
        peak_seen = 0.0
        while True:
            self._dispatch(spec, tracker.drain_events(), observer)
            now = time.monotonic()
            returncode = proc.poll()
            state = tracker.snapshot()
            if returncode is not None:
                code, sig = split_returncode(returncode)
                how = f"killed by {sig}" if sig else f"exit code {code}"
                return Decision(StopReason.EXITED, f"the command ended ({how})", state.open_phase)
            decision = watch.check(state, now)
            if decision is not None:
                return decision
            gpu_peaks = sampler.gpu_peak_gib or state.memory_peak_gib
            peak = max(gpu_peaks.values()) if gpu_peaks else None
            if peak is not None and peak > peak_seen:
                peak_seen = peak
                observer.on_memory(spec, peak)
            last = state.last_progress_t
            progress = TrialProgress(
                elapsed_s=now - t0,
                step_times_s=state.step_times_s,
                open_phase=state.open_phase,
                last_progress_s=now - (last if last is not None else t0),
                peak_mem_gib=peak,
            )
            decision = observer_decision(observer, spec, progress, state)
            if decision is not None:
                return decision
            time.sleep(self.poll_s)

    @staticmethod
    def _dispatch(spec: TrialSpec, events: list[ProgressEvent], observer: TrialObserver) -> None:
        for ev in events:
            if ev.kind == "step":
                observer.on_step(spec, ev.step_index or 0, ev.seconds or 0.0)
            elif ev.kind == "phase_end" and ev.phase is not None:
                observer.on_phase(spec, ev.phase, ev.seconds or 0.0)

    def _stacks(self, spec: TrialSpec, proc: subprocess.Popen, decision: Decision) -> StackReport | None:
        """At a stall (or a start-up that never progressed), every rank's stack, before teardown."""
        if decision.reason not in (StopReason.STALL, StopReason.STARTUP):
            return None
        try:
            return self._collect_stacks(spec, proc)
        except Exception as exc:  # a stack reader's failure must not stop the teardown
            return StackReport(note=f"the ranks' stacks could not be taken ({type(exc).__name__}: {exc})")

    def _collect_stacks(self, spec: TrialSpec, proc: subprocess.Popen) -> StackReport:
        """Where the trial's processes live (this machine; the Ray launcher asks the trial's node)."""
        return collect_stacks(spec.marker, proc.pid, self.stack_timeout_s)

    def _result(
        self,
        spec: TrialSpec,
        proc: subprocess.Popen,
        decision: Decision,
        tracker: ProgressTracker,
        sampler: MemorySampler,
        report: TeardownReport,
        log_path: Path,
        t0: float,
        reader_error: BaseException | None = None,
        stacks: StackReport | None = None,
        upto: Mapping[Path, int] | None = None,
    ) -> TrialResult:
        logs = (log_path, *(p for p in trial_log_files(spec.trial_dir) if p != log_path))
        nccl_seen = scan_trial_logs(logs, log_path, tracker)  # a trainer's own logs: memory lines, NCCL's env report
        state = tracker.snapshot()
        exit_code, signal_name = split_returncode(proc.returncode)
        dumps = collect_dumps(fr_prefix(spec.env, spec.trial_dir))
        notes = []
        if reader_error is not None:
            notes.append(
                f"the log reader failed ({type(reader_error).__name__}: {reader_error}); output.log may be incomplete"
            )
        if report.survivors:
            left = "; ".join(f"pid {p} ({c})" for p, c in zip(report.survivor_pids, report.survivor_commands))
            notes.append(f"{report.survivors} process(es) survived teardown and could not be killed: {left}")
        facts = TrialFacts(
            logs=tuple(
                LogFacts(
                    source_name(p, spec.trial_dir), p, upto=decision.log_lines if p == log_path else (upto or {}).get(p)
                )
                for p in logs
            ),
            stop_reason=decision.reason,
            stop_detail=decision.detail,
            open_phase=decision.open_phase,
            exit_code=exit_code,
            signal_name=signal_name,
            steps_done=len(state.step_times_s),
            total_steps=spec.stop.total_steps,
            training_done=state.training_done,
            host_mem_peak_frac=sampler.host_peak_frac,
            fr_summary=_analyse(dumps),
            stacks=stacks,
            progress=apply_preset(spec.progress, state.preset) if spec.progress.detect else spec.progress,
            rules_hint=rules_hint(spec.progress),
            memory_knobs=spec.memory_knobs,
            trainer=state.preset or spec.progress.preset,
            notes=tuple(notes),
        )
        verdict = self._verdict(facts)
        write_facts(facts, spec.trial_dir)
        return TrialResult(
            number=spec.number,
            status=verdict.failure_class,
            verdict=verdict,
            stop_reason=decision.reason,
            exit_code=exit_code,
            signal_name=signal_name,
            step_times_s=state.step_times_s,
            step_rates=state.step_rates,
            rate_unit=state.rate_unit,
            progress_preset=state.preset,
            warmup_steps=spec.stop.warmup_steps,
            phase_max_s=state.phase_max_s,
            samples_per_step=state.samples_per_step or spec.samples_per_step,
            memory=build_report(sampler, state, self.gpu_gate.baseline_gib or {}),
            wall_s=time.monotonic() - t0,
            trial_dir=spec.trial_dir,
            log_paths=logs,
            fr_dumps=dumps,
            escaped_processes=report.escaped,
            survivors=report.survivors,
            nccl_env_seen=nccl_seen,
        )

    @staticmethod
    def _verdict(facts: TrialFacts) -> Verdict:
        try:
            return decide(facts)
        except Exception as exc:  # a classifier bug must not lose the trial's record
            return Verdict(
                FailureClass.CRASH,
                evidence=(Evidence(0, f"{facts.stop_detail}; the log could not be classified: {exc}", "nccl-tune"),),
                advice="read output.log in the trial folder",
                cause=Cause("classifier_error", "", {"error": f"{type(exc).__name__}: {exc}"}),
            )

    def _launch_error(
        self, spec: TrialSpec, observer: TrialObserver, message: str, log_path: Path, t0: float
    ) -> TrialResult:
        facts = TrialFacts(stop_reason=StopReason.LAUNCH_ERROR, stop_detail=message)
        verdict = decide(facts)
        write_facts(facts, spec.trial_dir)
        result = TrialResult(
            number=spec.number,
            status=verdict.failure_class,
            verdict=verdict,
            stop_reason=StopReason.LAUNCH_ERROR,
            wall_s=time.monotonic() - t0,
            trial_dir=spec.trial_dir,
            log_paths=(log_path,),
        )
        write_result(result, spec.trial_dir)
        observer.on_end(spec, result)
        return result
