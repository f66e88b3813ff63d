"""``PipedTree``: a trial's process tree whose output this process reads from a pipe, as the local
launcher (the command's own stdout) and the Ray launcher (a pipe fed with the output fetched from
the trial's node) both run it; and the trial folder both write before the command starts.

The pipe is streamed to ``output.log`` and parsed line by line (``logstream.LogPump`` into
``progress.ProgressTracker``); the clock is the wall clock, looked at every ``poll_s``. After
teardown, every log of the trial folder is read (``trial_logs``), the Flight Recorder dumps
collected and analysed, and the facts written beside the result (``facts.json``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Generic, Protocol, TypeVar

from nccl_tune.diagnose.logfiles import source_name, trial_log_files
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, decide
from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers import private_ray
from nccl_tune.launchers.fr import clear_dumps, collect_dumps, fr_env, fr_prefix
from nccl_tune.launchers.logstream import LineScanner, LogPump
from nccl_tune.launchers.memory import MemorySource, build_report
from nccl_tune.launchers.process_tree import Ending, ExitStatus, Findings, LaunchFailed, ProcessTree
from nccl_tune.launchers.progress import ProgressEvent, ProgressState, ProgressTracker, rules_hint
from nccl_tune.launchers.trial_files import LOG_FILE, write_facts, write_spec
from nccl_tune.launchers.trial_logs import count_lines, scan_trial_logs
from nccl_tune.presets import apply_preset
from nccl_tune.trial import StopReason, TrialResult, TrialSpec

POLL_S = 0.1
"""How often supervision looks at a running trial."""
TAIL_LINES = 50
"""Last lines of the output kept in memory."""


class Command(Protocol):
    """The trial's top process, as a piped tree reads it: a ``subprocess.Popen``, or the Ray
    launcher's ``RemoteProcess`` (the node's command, its output fed to a pipe here)."""

    @property
    def pid(self) -> int: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...


CommandT = TypeVar("CommandT", bound=Command)
PhasesOpen = Callable[[], tuple[str, ...]]
"""The phases open now, outermost first (``ProgressTracker.open_phases``)."""


@dataclass(frozen=True)
class TrialFolder:
    """A trial's folder, written before its command starts, and the environment it runs with."""

    log_path: Path
    overlay: dict[str, str | None]
    """The trial's environment overlay (None removes a variable): its own, the Flight Recorder's
    dump path, and its private Ray when it has one."""


def _effective_env(overlay: Mapping[str, str | None]) -> dict[str, str]:
    """The tuner's environment with the trial's overlay applied (None removes a variable)."""
    env = dict(os.environ)
    for key, value in overlay.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def open_folder(spec: TrialSpec, own_ray: bool) -> TrialFolder:
    """Write the trial's folder (an empty ``output.log``, ``spec.json``; stale dumps cleared) and build
    its overlay; ``own_ray``: give the trial a private Ray for its own ``ray.init()``
    (``launchers.private_ray``). Raises ``NcclTuneError`` when the folder cannot be written."""
    trial_dir = spec.trial_dir
    log_path = trial_dir / LOG_FILE
    try:
        trial_dir.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
        overlay = fr_env(spec.env, trial_dir)
        if own_ray:
            overlay.update(private_ray.trial_ray_env(_effective_env(overlay), trial_dir, spec.marker))
        private_ray.prepare(overlay)
        clear_dumps(fr_prefix(spec.env, trial_dir))
        write_spec(spec, overlay)
    except OSError as exc:  # nothing started yet: the study cannot record trials at all
        raise NcclTuneError(
            f"cannot write the trial folder {trial_dir} ({exc.strerror or exc}): choose another --results folder"
        ) from None
    return TrialFolder(log_path, overlay)


def launch_error(spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
    """The result of a trial whose command could not start, decided from the reason (its facts written)."""
    facts = TrialFacts(stop_reason=StopReason.LAUNCH_ERROR, stop_detail=failed.reason)
    verdict = decide(facts)
    write_facts(facts, spec.trial_dir)
    return TrialResult(
        number=spec.number,
        status=verdict.failure_class,
        verdict=verdict,
        stop_reason=StopReason.LAUNCH_ERROR,
        wall_s=time.monotonic() - failed.started_t,
        trial_dir=spec.trial_dir,
        log_paths=(spec.trial_dir / LOG_FILE,),
    )


def _analyse(dumps: tuple[Path, ...]):  # noqa: ANN202 - FlightRecorderSummary | None
    """The Flight Recorder analysis of the dumps the trial left (None without any)."""
    if not dumps:
        return None
    from nccl_tune.diagnose.flight_recorder import analyse_dumps

    return analyse_dumps(list(dumps))


class PipedTree(ProcessTree, Generic[CommandT]):
    """A running trial whose output arrives through ``command.stdout`` (see the module docstring).
    It starts reading the output and sampling memory as it is made."""

    def __init__(
        self,
        spec: TrialSpec,
        command: CommandT,
        folder: TrialFolder,
        started_t: float,
        sampler: Callable[[PhasesOpen], MemorySource],
        *,
        baseline_gib: Mapping[int, float],
        poll_s: float = POLL_S,
        tail_lines: int = TAIL_LINES,
    ) -> None:
        """``sampler``: the trial's memory sampler, given the phases its output has open;
        ``baseline_gib``: used memory per GPU before the study (for the memory report)."""
        self.spec = spec
        self.command = command
        self.pid = command.pid
        self.folder = folder
        self.started_t = started_t
        self.baseline_gib = baseline_gib
        self.poll_s = poll_s
        self.tracker = ProgressTracker(spec.progress, start_t=started_t)
        self.scanner = LineScanner(
            self.tracker.feed, self.tracker.current_literals, source=LOG_FILE, tail_lines=tail_lines
        )
        assert command.stdout is not None
        self.pump = LogPump(command.stdout.fileno(), folder.log_path, self.scanner)
        self.sampler = sampler(self.tracker.open_phases)
        self.pump.start()
        self.sampler.start()
        self._looked = False
        self._held_lines: int | None = None
        """Lines of the output at a stop for silence."""
        self._held_upto: dict[Path, int] = {}
        """At a stop for silence: the lines each of the trainer's own logs held."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, due_t: float) -> None:
        """At once the first time (the command just started), then ``poll_s`` later."""
        if self._looked:
            time.sleep(self.poll_s)
        self._looked = True

    def events(self) -> list[ProgressEvent]:
        return self.tracker.drain_events()

    def state(self) -> ProgressState:
        return self.tracker.snapshot()

    def exit_status(self) -> ExitStatus | None:
        return ExitStatus.of(self.command.poll())

    def memory_peak_gib(self, state: ProgressState) -> float | None:
        """The sampler's GPU peaks, else the memory lines the trainer printed."""
        gpu_peaks = self.sampler.gpu_peak_gib or state.memory_peak_gib
        return max(gpu_peaks.values()) if gpu_peaks else None

    def hold_output(self) -> None:
        log_path = self.folder.log_path
        self._held_lines = self.scanner.lines
        self._held_upto = {p: count_lines(p) for p in trial_log_files(self.spec.trial_dir) if p != log_path}

    def close(self) -> None:
        """Stop the log pump (it drains what is in the pipe first) and the sampler; remove the
        trial's private Ray folder when it is outside the trial folder."""
        self.pump.stop()
        assert self.command.stdout is not None
        self.command.stdout.close()
        self.sampler.stop()
        private_ray.cleanup(self.folder.overlay, self.spec.trial_dir)

    def findings(self, spec: TrialSpec, ending: Ending) -> Findings:
        """Every log of the trial folder read (the other logs' memory lines, NCCL's environment
        report), the Flight Recorder dumps analysed, the facts written to ``facts.json``."""
        log_path = self.folder.log_path
        logs = (log_path, *(p for p in trial_log_files(spec.trial_dir) if p != log_path))
        nccl_seen = scan_trial_logs(logs, log_path, self.tracker)
        state = self.tracker.snapshot().upto(ending.decision.steps_kept)
        dumps = collect_dumps(fr_prefix(spec.env, spec.trial_dir))
        facts = TrialFacts(
            logs=tuple(
                LogFacts(
                    source_name(p, spec.trial_dir),
                    p,
                    upto=self._held_lines if p == log_path else self._held_upto.get(p),
                )
                for p in logs
            ),
            stop_reason=ending.decision.reason,
            stop_detail=ending.decision.detail,
            open_phase=ending.decision.open_phase,
            exit_code=ending.exit.code,
            signal_name=ending.exit.signal_name,
            steps_done=len(state.step_times_s),
            total_steps=state.warmup_for(spec.stop.warmup_steps) + spec.stop.measured_steps,
            enough_steps=state.warmup_for(spec.stop.warmup_steps) + spec.stop.least_measured_steps,
            training_done=state.training_done,
            host_mem_peak_frac=self.sampler.host_peak_frac,
            fr_summary=_analyse(dumps),
            stacks=ending.stacks,
            progress=apply_preset(spec.progress, state.preset) if spec.progress.detect else spec.progress,
            rules_hint=rules_hint(spec.progress),
            memory_knobs=spec.memory_knobs,
            trainer=state.preset or spec.progress.preset,
            notes=self._notes(ending),
        )
        write_facts(facts, spec.trial_dir)
        memory = build_report(self.sampler, state, self.baseline_gib)
        return Findings(
            facts,
            memory=memory,
            log_paths=logs,
            fr_dumps=dumps,
            nccl_env_seen=nccl_seen,
            gpus=len(memory.gpus) if memory is not None and memory.source == "nvml" and memory.gpus else None,
        )

    def _notes(self, ending: Ending) -> tuple[str, ...]:
        """What went wrong around the trial: the log reader's failure, processes teardown left."""
        notes = []
        error = self.pump.error
        if error is not None:
            notes.append(f"the log reader failed ({type(error).__name__}: {error}); output.log may be incomplete")
        cut = self.pump.write_error
        if cut is not None:
            notes.append(
                f"output.log could not be written to the end ({cut.strerror}): it is cut there; the output was "
                "still read to its end"
            )
        report = ending.teardown
        if report.survivors:
            left = "; ".join(f"pid {p} ({c})" for p, c in zip(report.survivor_pids, report.survivor_commands))
            notes.append(f"{report.survivors} process(es) survived teardown and could not be killed: {left}")
        return tuple(notes)
