"""``ModelLauncher``: runs a trial against the cost model, in process, without starting anything.

It reads the trial as the twin program would (the ``key=value`` tokens of ``spec.argv`` on top of
the overrides of ``examples/run_skyrl_sql_sim.sh``; the trial's environment built by
``launchers.process.build_env``) and models the run (:func:`twin.evaluate`). It is a
sibling of the local and Ray launchers (``launchers.process_tree.ProcessTreeLauncher``): the modelled
run is its process tree, whose clock is the modelled one, so the one supervision loop the tool ships
watches it: the run's phase and step events go, one at a time, to the launcher's own
``ProgressLedger``, its ``Watch`` (start-up deadline, adaptive stall timeout, trial budget, stop
rule) and the observer's early stop and interrupt, and between two events the loop jumps to the
next event or to when the first clock would fire. So the search benchmark measures the rules the
tool applies. All times in the result are modelled seconds of the real node (``wall_s`` included:
teardown takes ``TEARDOWN_S``, at most the grace); ``gpu_s`` is ``wall_s`` times the
node's 8 GPUs. A configuration the twin refuses is a run that prints the refusal and exits 1 after
``CONFIG_ERROR_WALL_S``; a trial the model cannot evaluate is a crash naming the model's error.

The class comes from the verdict function every launcher uses (``diagnose.verdict.decide``), fed
with the modelled facts: the lines the twin would have printed by the stop (SkyRL's timer lines and
the cost model's own lines for its failure), the stop reason, the exit status or our SIGTERM, the
steps done; so the benchmarks measure the rules the tool ships.
"""

from __future__ import annotations

import os
import re
import zlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from nccl_tune.diagnose.stacks import Frame, ProcessStack, StackReport, ThreadStack
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts
from nccl_tune.failure import Cause, Evidence, FailureClass, Verdict
from nccl_tune.launchers.base import CheckSupport
from nccl_tune.launchers.process import build_env
from nccl_tune.launchers.process_tree import (
    Ending,
    ExitStatus,
    Findings,
    LaunchFailed,
    ProcessTree,
    ProcessTreeLauncher,
)
from nccl_tune.launchers.progress import ProgressEvent, ProgressLedger, ProgressState
from nccl_tune.launchers.supervise import Decision
from nccl_tune.launchers.teardown import TeardownReport
from nccl_tune.launchers.trial_files import LOG_FILE, write_result
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult, TrialSpec
from twin import logfmt
from twin.config import parse_overrides
from twin.cost_model import H100_CAPACITY_GIB
from twin.evaluate import Outcome, PhaseSpan, SimFailure, evaluate
from twin.refusal import SimConfigError
from twin.script import skyrl_sql_overrides
from twin.shapes import GPUS_PER_NODE

CONFIG_ERROR_WALL_S = 8.0
"""Modelled seconds a refused configuration costs (Python start-up, Hydra's parse)."""
TEARDOWN_S = 5.0
"""Modelled seconds from the launcher's stop to no process left (SIGTERM to a Ray job)."""
_OVERRIDE = re.compile(r"^(?:\+\+|\+|~)?[A-Za-z_][\w\-]*(?:\.[\w\-]+)*(?:=|$)")
_BASE_TIME = datetime(2026, 3, 2, 10, 0, 0)
ENTRYPOINT_PID = 400000
WORKER_PID = 400100
"""The pids the cost model's lines give the entry point and the policy worker of GPU ``g`` (+ g)."""
NO_TEARDOWN = TeardownReport(in_group=0, escaped=0, killed=0, survivors=0, elapsed_s=0.0)


def _when(t: float) -> datetime:
    return _BASE_TIME + timedelta(seconds=t)


def override_tokens(argv: Sequence[str]) -> list[str]:
    """The Hydra override tokens of a command line (``key=value``, ``+key=...``, ``~key``)."""
    out = []
    for tok in argv[1:]:
        if ("=" in tok or tok.startswith("~")) and _OVERRIDE.match(tok) and not tok.startswith("-"):
            out.append(tok)
    return out


class ModelLauncher(ProcessTreeLauncher["ModelledTree"]):
    """Runs trials against the synthetic node's cost model (no processes, thousands per second)."""

    name = "model"

    def __init__(
        self,
        base_overrides: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        write_result: bool = False,
        cost: Callable[[TrialSpec, int, int], Outcome] | None = None,
        nccl_check_gpus: int | None = None,
        memory_as_logged: bool = False,
    ) -> None:
        """``base_overrides``: the command's own overrides (default: the twin script's);
        ``env``: the environment trials start from (default: this process's);
        ``write_result``: also write ``result.json`` into each trial folder;
        ``cost``: another cost model, ``(spec, run seed, steps) -> Outcome`` (an analytic landscape,
        ``twin.analytic``), in place of the twin's; supervised the same way;
        ``nccl_check_gpus``: the node's GPUs when ``cost`` models the NCCL check too
        (``spec.nccl_check``: ``analytic.analytic_cost`` does), else None (the twin does not);
        ``memory_as_logged``: report memory as ``nccl-tune run`` reads it from a trainer's log (the
        per-GPU peaks of the steps that finished; no per-phase peaks, nothing from the step that
        failed), not the model's whole knowledge."""
        self.base_env = dict(os.environ if env is None else env)
        self.base_overrides = (
            list(base_overrides) if base_overrides is not None else skyrl_sql_overrides(self.base_env.get("HOME"))
        )
        self.write_result = write_result
        self.cost = cost
        self._check_gpus = nccl_check_gpus if cost is not None else None
        self.memory_as_logged = memory_as_logged

    def nccl_check_support(self) -> CheckSupport:
        if self._check_gpus is None:
            return CheckSupport(
                None, "the twin does not model it" if self.cost is None else "this cost model does not model it"
            )
        return CheckSupport(self._check_gpus)

    def trial_env(self, spec: TrialSpec) -> dict[str, str]:
        """The environment the trial's command would see (the local launcher's own rule)."""
        return build_env(spec.env, spec.marker, base=self.base_env)

    def close(self) -> None:
        """Nothing to release."""

    # -- the process tree's hooks: the modelled run ----------------------------------------------

    @contextmanager
    def launch(self, spec: TrialSpec) -> Iterator[ModelledTree | LaunchFailed]:
        """Model the trial's run; ``LaunchFailed`` when the model cannot evaluate it. Nothing to release."""
        yield self._model(spec)

    def _model(self, spec: TrialSpec) -> ModelledTree | LaunchFailed:
        seed = zlib.crc32(f"{spec.study}/{spec.number}".encode())
        try:
            if self.cost is not None:
                return ModelledRun(spec, self.cost(spec, seed, spec.stop.total_steps), self.memory_as_logged)
            env = self.trial_env(spec)
            tokens = self.base_overrides + override_tokens(spec.argv)
            try:
                cfg = parse_overrides(tokens, env)
            except SimConfigError as exc:
                return RefusedRun(spec, exc)
            if cfg.env.sim_seed is not None:
                seed = cfg.env.sim_seed
            return ModelledRun(spec, evaluate(cfg, seed=seed, steps=spec.stop.total_steps), self.memory_as_logged)
        except Exception as exc:  # noqa: BLE001 - the launcher contract: failures are values
            return LaunchFailed(f"{type(exc).__name__}: {exc}", 0.0)

    def take_stacks(self, spec: TrialSpec, tree: ModelledTree) -> StackReport:
        return tree.stacks()

    def tear_down(self, spec: TrialSpec, tree: ModelledTree) -> TeardownReport:
        return tree.stop(spec.clocks.grace_s)

    def launch_error_result(self, spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
        """The model could not evaluate the trial: a crash naming the model's error."""
        verdict = Verdict(
            FailureClass.CRASH,
            evidence=(Evidence(0, f"model launcher error: {failed.reason}", "nccl-tune"),),
            advice="the cost model could not evaluate this trial; report it with the trial's argv and env",
            cause=Cause("model_error", "", {"error": failed.reason}),
        )
        return TrialResult(
            number=spec.number,
            status=FailureClass.CRASH,
            verdict=verdict,
            stop_reason=StopReason.LAUNCH_ERROR,
            trial_dir=spec.trial_dir,
            samples_per_step=spec.samples_per_step,
        )

    def record(self, spec: TrialSpec, result: TrialResult) -> None:
        """``result.json`` in the trial folder when asked for; the result is returned even when it
        cannot be written."""
        if self.write_result:
            try:
                write_result(result, spec.trial_dir)
            except OSError:
                pass


def _timeline(phases: Sequence[PhaseSpan]) -> list[tuple[float, bool, PhaseSpan]]:
    """(time, is_start, span): at one instant, phases end (innermost first) before the next start
    (outermost first)."""
    events = []
    for span in phases:
        events.append(((span.start_s, 1, span.depth), True, span))
        if span.end_s is not None:
            events.append(((span.end_s, 0, -span.depth), False, span))
    events.sort(key=lambda e: e[0])
    return [(key[0], is_start, span) for key, is_start, span in events]


class ModelledTree(ProcessTree):
    """A modelled run as the supervision loop sees a process tree: its phase and step events replayed,
    one at a time, on the modelled clock (seconds since launch) into the launcher's own
    ``ProgressLedger``, as the twin's log lines would tell it; the command ends by itself at ``end_s``."""

    pid = None
    started_t = 0.0

    def __init__(self, spec: TrialSpec, phases: Sequence[PhaseSpan], end_s: float) -> None:
        self.spec = spec
        self.timeline = _timeline(phases)
        self.end_s = end_s
        self.ledger = ProgressLedger(launch_t=0.0)
        self.peak = 0.0
        self.stopped_at = 0.0
        """When the launcher stopped watching (the decision's time)."""
        self._next = 0
        self._now = 0.0
        self._events: list[ProgressEvent] = []
        self._exit: ExitStatus | None = None

    @abstractmethod
    def _exit_at(self, at: float) -> ExitStatus:
        """How the command ends had it ended by itself at ``at``."""

    @abstractmethod
    def _trained(self, span: PhaseSpan) -> float | None:
        """The per-GPU peak of the training pass ``span`` just finished (None when not modelled)."""

    @abstractmethod
    def stacks(self) -> StackReport:
        """What py-spy would show now, at a stop for silence."""

    # -- the modelled clock and what the run prints --------------------------------------------
    def now(self) -> float:
        return self._now

    def wait(self, due_t: float) -> None:
        """To the next event, or to the command's own end once none is left, unless ``due_t`` comes first."""
        if self._next < len(self.timeline):
            t, is_start, span = self.timeline[self._next]
            if due_t < t:
                self._now = due_t
                return
            self._next += 1
            self._now = t
            self._apply(t, is_start, span)
        elif due_t < self.end_s:
            self._now = due_t
        else:
            self._now = self.end_s
            self._exit = self._exit_at(self.end_s)

    def _apply(self, t: float, is_start: bool, span: PhaseSpan) -> None:
        """What the twin's log line for this event tells the ledger."""
        name, line_no = span.name, self._next
        if is_start:
            self.ledger.phase_started(name, t)
            self._events.append(ProgressEvent("phase_start", line_no, t, name))
            return
        seconds = span.duration_s or 0.0
        if name == "step":  # "Finished: 'step', ..." is the step_end line
            index = self.ledger.step_finished(seconds, t)
            self._events.append(ProgressEvent("step", line_no, t, name, seconds, index))
            return
        self.ledger.phase_finished(name, seconds, t)
        self._events.append(ProgressEvent("phase_end", line_no, t, name, seconds))
        if name == "policy_train":
            peak = self._trained(span)
            if peak is not None and peak > self.peak:
                self.peak = peak

    def events(self) -> list[ProgressEvent]:
        events, self._events = self._events, []
        return events

    def state(self) -> ProgressState:
        return self.ledger.snapshot()

    def exit_status(self) -> ExitStatus | None:
        return self._exit

    def memory_peak_gib(self, state: ProgressState) -> float | None:
        """The peak of the training passes finished so far."""
        return self.peak or None

    def hold_output(self) -> None:
        """Nothing to hold: the modelled output is what the command printed by the stop."""

    def close(self) -> None:
        """Nothing runs."""

    def stop(self, grace_s: float) -> TeardownReport:
        """Our SIGTERM, unless the command ended by itself: the modelled clock moves on by teardown."""
        self.stopped_at = self._now
        if self._exit is not None:
            return NO_TEARDOWN
        took = min(TEARDOWN_S, grace_s)
        self._now += took
        self._exit = ExitStatus(None, "SIGTERM")
        return TeardownReport(in_group=0, escaped=0, killed=0, survivors=0, elapsed_s=took)


class RefusedRun(ModelledTree):
    """A configuration the twin refuses: the lines it prints, exit 1 after ``CONFIG_ERROR_WALL_S``."""

    def __init__(self, spec: TrialSpec, refusal: SimConfigError) -> None:
        super().__init__(spec, (), CONFIG_ERROR_WALL_S)
        self.lines = tuple(refusal.lines)

    def _exit_at(self, at: float) -> ExitStatus:
        return ExitStatus(1, None)

    def _trained(self, span: PhaseSpan) -> float | None:
        return None

    def stacks(self) -> StackReport:
        return StackReport()

    def findings(self, spec: TrialSpec, ending: Ending) -> Findings:
        facts = TrialFacts(
            logs=(LogFacts(LOG_FILE, lines=self.lines),),
            stop_reason=ending.decision.reason,
            stop_detail=ending.decision.detail,
            exit_code=ending.exit.code,
            signal_name=ending.exit.signal_name,
            steps_done=0,
            total_steps=spec.stop.total_steps,
            progress=spec.progress,
            trainer="skyrl",
        )
        return Findings(facts, memory=None, warmup_steps=0, gpus=GPUS_PER_NODE)


class ModelledRun(ModelledTree):
    """A run the cost model modelled (``Outcome``): its phases, its memory, its failure."""

    def __init__(self, spec: TrialSpec, outcome: Outcome, as_logged: bool = False) -> None:
        super().__init__(spec, outcome.phases, outcome.end_s)
        self.out = outcome
        self.as_logged = as_logged

    def _exit_at(self, at: float) -> ExitStatus:
        failure = self.out.failure
        if failure is not None and failure.at_s <= at:
            return ExitStatus(failure.exit_code, failure.signal_name)
        return ExitStatus(0, None)

    def _trained(self, span: PhaseSpan) -> float | None:
        mem = self.out.step_memory_gib.get(span.step)
        return max(mem) if mem else None

    def _failure_by(self, at: float) -> SimFailure | None:
        """The run's failure, once it has happened by ``at``."""
        failure = self.out.failure
        return failure if failure is not None and failure.at_s <= at else None

    def findings(self, spec: TrialSpec, ending: Ending) -> Findings:
        """The modelled facts at the stop, the memory of the steps begun by then."""
        at, state = self.stopped_at, self.ledger.snapshot()
        finished = range(1, len(state.step_times_s) + 1)
        tokens = self.out.step_tokens
        return Findings(
            self._facts(at, ending, state),
            memory=self._memory(at, state.open_phases, finished),
            warmup_steps=min(spec.stop.warmup_steps, len(state.step_times_s)),
            gpus=GPUS_PER_NODE,
            step_tokens=tuple(float(tokens[k].max_num_tokens) if k in tokens else None for k in finished),
        )

    # -- the result --------------------------------------------------------------------------
    def _memory(self, until_s: float, open_phases: Sequence[str], finished: Sequence[int] = ()) -> MemoryReport | None:
        """Per-GPU and per-phase peaks of the steps that started before ``until_s`` (None when none
        did), and the peak of each ``finished`` step; ``open_phases``: the ledger's open-phase
        stack at ``until_s`` (a failed run's ends in the phase it failed in)."""
        peaks = [0.0] * len(self.out.gpu_peak_gib)
        started = {s.step for s in self.out.phases if s.name == "step" and s.start_s <= until_s}
        if self.as_logged:  # a trainer prints a step's peak once the step is done
            started = {
                s.step for s in self.out.phases if s.name == "step" and s.end_s is not None and s.end_s <= until_s
            }
        if not started & set(self.out.step_memory_gib):
            return None
        for step, mem in self.out.step_memory_gib.items():
            if step in started:
                peaks = [max(a, b) for a, b in zip(peaks, mem)]
        phase_gib: dict[str, float] = {}
        for step, by_phase in self.out.step_phase_memory_gib.items():
            if step in started:
                for name, gib in by_phase.items():
                    phase_gib[name] = max(phase_gib.get(name, 0.0), gib)
        if self.as_logged:
            phase_gib = {}
        return MemoryReport(
            source="log" if self.as_logged else "model",
            gpus=tuple(
                GpuMemory(index=g, total_gib=H100_CAPACITY_GIB, peak_gib=round(p, 3)) for g, p in enumerate(peaks)
            ),
            phase_peak_frac={name: round(gib, 3) / H100_CAPACITY_GIB for name, gib in phase_gib.items()},
            phases_open_at_end=() if self.as_logged else tuple(open_phases) or (OUTSIDE_PHASES,),
            step_peak_frac=tuple(
                round(max(self.out.step_memory_gib[k]), 3) / H100_CAPACITY_GIB
                for k in finished
                if k in self.out.step_memory_gib
            ),
        )

    # -- classification: the shared verdict function, fed with the modelled facts ---------------
    def _log_lines(self, at: float, failure: SimFailure | None, decision: Decision) -> list[str]:
        """The output the twin would have printed by ``at``: SkyRL's timer lines (Ray prefix,
        loguru format, time stamps) and the cost model's own lines for the failure; the other
        ranks' watchdog lines only once the command has run its cascade to its end."""
        start = self.out.startup_s if self.out.phases else 0.0
        lines = (
            [  # the workers introduce themselves once their process group is up, as the twin's do
                f"({logfmt.POLICY_ACTOR} pid={WORKER_PID + g}) "
                + logfmt.loguru_line(
                    f"Initialized process group rank {g}/{len(self.out.gpu_peak_gib)}",
                    when=_when(start),
                    name="skyrl_train.workers.fsdp.fsdp_worker",
                    function="init_model",
                    line=88,
                    color=False,
                )
                for g in range(len(self.out.gpu_peak_gib))
            ]
            if start <= at
            else []
        )
        fail_at = failure.at_s if failure is not None else None
        emitted = False
        for t, is_start, span in self.timeline:
            if t > at:
                break
            if fail_at is not None and not emitted and t > fail_at:
                lines += self._failure_lines(failure, decision)
                emitted = True
            msg = logfmt.started(span.name) if is_start else logfmt.finished(span.name, span.duration_s or 0.0)
            lines.append(self._trainer(span.name, msg, t))
        if failure is not None and not emitted:
            lines += self._failure_lines(failure, decision)
        elif failure is None and decision.reason is StopReason.EXITED and self.out.steps:
            lines.append(self._trainer("step", "Training done!", at))
        return lines

    @staticmethod
    def _failure_lines(failure: SimFailure, decision: Decision) -> list[str]:
        return [ln for ln in failure.evidence if decision.reason is StopReason.EXITED or "Watchdog" not in ln]

    @staticmethod
    def _trainer(site: str, message: str, t: float) -> str:
        line = logfmt.trainer_line(site, message, when=_when(t), color=False)
        return f"({logfmt.ENTRYPOINT_ACTOR} pid={ENTRYPOINT_PID}) {line}"

    def stacks(self) -> StackReport:
        """What py-spy would show at a stall the twin's injected hang caused: the hung rank asleep
        in its fault, the others in the all-gather it never joins."""
        failure = self._failure_by(self._now)
        if failure is None or failure.kind != "hang_fault" or failure.rank is None:
            return StackReport()
        procs = []
        for g in range(len(self.out.gpu_peak_gib)):
            if g == failure.rank:
                frames = (Frame("_event", "twin/worker.py", 221, "time.sleep(self.spec['timeout_s'] + 0.5)"),)
            else:
                frames = (
                    Frame("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 3800, ""),
                    Frame("_all_gather", "twin/worker.py", 160, ""),
                )
            procs.append(
                ProcessStack(
                    WORKER_PID + g,
                    g,
                    "python -m twin.worker",
                    (ThreadStack("MainThread", False, frames, main=True),),
                )
            )
        return StackReport(tuple(procs))

    def _facts(self, at: float, ending: Ending, state: ProgressState) -> TrialFacts:
        decision, failure = ending.decision, self._failure_by(at)
        return TrialFacts(
            logs=(LogFacts(LOG_FILE, lines=tuple(self._log_lines(at, failure, decision))),),
            stop_reason=decision.reason,
            stop_detail=decision.detail,
            open_phase=decision.open_phase or state.open_phase,
            exit_code=ending.exit.code,
            signal_name=ending.exit.signal_name,
            steps_done=len(state.step_times_s),
            total_steps=self.spec.stop.total_steps,
            training_done=failure is None and decision.reason is StopReason.EXITED and bool(self.out.steps),
            stacks=ending.stacks,
            progress=self.spec.progress,
            memory_knobs=self.spec.memory_knobs,
            trainer="skyrl",
        )
