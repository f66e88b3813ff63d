"""``ModelLauncher``: runs a trial against the cost model, in process, without starting anything.

It reads the trial as the twin program would (the ``key=value`` tokens of ``spec.argv`` on top of
the overrides of ``examples/run_skyrl_sql_sim.sh``; the trial's environment built by
``launchers.process.build_env``), models the run (:func:`nccl_tune.sim.evaluate`) and feeds the
modelled run's phase and step events to the supervision the local launcher ships: its
``ProgressLedger``, its ``Watch`` (start-up deadline, adaptive stall timeout, trial budget, stop
rule) and the observer's early stop and interrupt, on the modelled clock, so the search
benchmark measures the rules the tool applies. All times in the result are modelled seconds of
the real node (``wall_s`` included); ``modelled_gpu_s`` is ``wall_s`` times the node's 8 GPUs.

The class comes from the verdict function every launcher uses (``diagnose.verdict.decide``), fed
with the modelled facts: the lines the twin would have printed by the stop (SkyRL's timer lines and
the cost model's own lines for its failure), the stop reason, the exit status or our SIGTERM, the
steps done; so the benchmarks measure the rules the tool ships.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from nccl_tune.diagnose.stacks import Frame, ProcessStack, StackReport, ThreadStack
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, decide
from nccl_tune.failure import Cause, Evidence, FailureClass, Verdict
from nccl_tune.launchers.base import CheckSupport, Launcher, TrialObserver, TrialProgress
from nccl_tune.launchers.process import build_env
from nccl_tune.launchers.progress import ProgressLedger, ProgressState
from nccl_tune.launchers.supervise import Decision, Watch, observer_decision
from nccl_tune.launchers.trial_files import LOG_FILE, write_result
from nccl_tune.sim import logfmt
from nccl_tune.sim.config import parse_overrides
from nccl_tune.sim.cost_model import H100_CAPACITY_GIB
from nccl_tune.sim.evaluate import Outcome, PhaseSpan, SimFailure, evaluate
from nccl_tune.sim.refusal import SimConfigError
from nccl_tune.sim.script import skyrl_sql_overrides
from nccl_tune.sim.shapes import GPUS_PER_NODE
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult, TrialSpec

CONFIG_ERROR_WALL_S = 8.0
"""Modelled seconds a refused configuration costs (Python start-up, Hydra's parse)."""
TEARDOWN_S = 5.0
"""Modelled seconds from the launcher's stop to no process left (SIGTERM to a Ray job)."""
_OVERRIDE = re.compile(r"^(?:\+\+|\+|~)?[A-Za-z_][\w\-]*(?:\.[\w\-]+)*(?:=|$)")
_BASE_TIME = datetime(2026, 3, 2, 10, 0, 0)
ENTRYPOINT_PID = 400000
WORKER_PID = 400100
"""The pids the cost model's lines give the entry point and the policy worker of GPU ``g`` (+ g)."""


def _when(t: float) -> datetime:
    return _BASE_TIME + timedelta(seconds=t)


def override_tokens(argv: Sequence[str]) -> list[str]:
    """The Hydra override tokens of a command line (``key=value``, ``+key=...``, ``~key``)."""
    out = []
    for tok in argv[1:]:
        if ("=" in tok or tok.startswith("~")) and _OVERRIDE.match(tok) and not tok.startswith("-"):
            out.append(tok)
    return out


class ModelLauncher(Launcher):
    """Runs trials against the synthetic node's cost model (no processes, thousands per second)."""

    name = "model"

    def __init__(
        self,
        base_overrides: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        write_result: bool = False,
        cost: Callable[[TrialSpec, int, int], Outcome] | None = None,
        nccl_check_gpus: int | None = None,
    ) -> None:
        """``base_overrides``: the command's own overrides (default: the twin script's);
        ``env``: the environment trials start from (default: this process's);
        ``write_result``: also write ``result.json`` into each trial folder;
        ``cost``: another cost model, ``(spec, run seed, steps) -> Outcome`` (an analytic landscape,
        ``nccl_tune.sim.analytic``), in place of the twin's; supervised the same way;
        ``nccl_check_gpus``: the node's GPUs when ``cost`` models the NCCL check too
        (``spec.nccl_check``: ``analytic.analytic_cost`` does), else None (the twin does not)."""
        self.base_env = dict(os.environ if env is None else env)
        self.base_overrides = (
            list(base_overrides) if base_overrides is not None else skyrl_sql_overrides(self.base_env.get("HOME"))
        )
        self.write_result = write_result
        self.cost = cost
        self._check_gpus = nccl_check_gpus if cost is not None else None

    def nccl_check_support(self) -> CheckSupport:
        if self._check_gpus is None:
            return CheckSupport(
                None, "the twin does not model it" if self.cost is None else "this cost model does not model it"
            )
        return CheckSupport(self._check_gpus)

    def trial_env(self, spec: TrialSpec) -> dict[str, str]:
        """The environment the trial's command would see (the local launcher's own rule)."""
        return build_env(spec.env, spec.marker, base=self.base_env)

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """Model the trial to its end; never raises."""
        observer = observer or TrialObserver()
        observer.on_start(spec, None)
        try:
            result = self._run(spec, observer)
        except Exception as exc:  # noqa: BLE001 - the launcher contract: failures are values
            verdict = Verdict(
                FailureClass.CRASH,
                evidence=(Evidence(0, f"model launcher error: {type(exc).__name__}: {exc}", "nccl-tune"),),
                advice="the cost model could not evaluate this trial; report it with the trial's argv and env",
                cause=Cause("model_error", "", {"error": f"{type(exc).__name__}: {exc}"}),
            )
            result = TrialResult(
                number=spec.number,
                status=FailureClass.CRASH,
                verdict=verdict,
                stop_reason=StopReason.LAUNCH_ERROR,
                trial_dir=spec.trial_dir,
                samples_per_step=spec.samples_per_step,
            )
        if self.write_result:
            try:
                write_result(result, spec.trial_dir)
            except OSError:  # the launcher contract: the result is returned even when it cannot be written
                pass
        observer.on_end(spec, result)
        return result

    # -- one trial ---------------------------------------------------------------------------
    def _run(self, spec: TrialSpec, observer: TrialObserver) -> TrialResult:
        if self.cost is not None:
            outcome = self.cost(spec, zlib.crc32(f"{spec.study}/{spec.number}".encode()), spec.stop.total_steps)
            return _Supervision(spec, observer, outcome).run()
        env = self.trial_env(spec)
        tokens = self.base_overrides + override_tokens(spec.argv)
        try:
            cfg = parse_overrides(tokens, env)
        except SimConfigError as exc:
            return self._refused(spec, exc)
        seed = cfg.env.sim_seed if cfg.env.sim_seed is not None else zlib.crc32(f"{spec.study}/{spec.number}".encode())
        outcome = evaluate(cfg, seed=seed, steps=spec.stop.total_steps)
        return _Supervision(spec, observer, outcome).run()

    def _refused(self, spec: TrialSpec, exc: SimConfigError) -> TrialResult:
        """The twin refused the configuration: the lines it prints, exit 1, decided like any run."""
        facts = TrialFacts(
            logs=(LogFacts(LOG_FILE, lines=tuple(exc.lines)),),
            stop_reason=StopReason.EXITED,
            stop_detail="the command ended (exit code 1)",
            exit_code=1,
            steps_done=0,
            total_steps=spec.stop.total_steps,
            progress=spec.progress,
            trainer="skyrl",
        )
        verdict = decide(facts)
        wall = CONFIG_ERROR_WALL_S
        return TrialResult(
            number=spec.number,
            status=verdict.failure_class,
            verdict=verdict,
            stop_reason=StopReason.EXITED,
            exit_code=1,
            samples_per_step=spec.samples_per_step,
            wall_s=wall,
            trial_dir=spec.trial_dir,
            modelled_gpu_s=wall * GPUS_PER_NODE,
        )

    def close(self) -> None:
        """Nothing to release."""


class _Supervision:
    """The modelled run's events fed to the local launcher's own supervision: its progress
    bookkeeping (``ProgressLedger``), its clocks and stop rule (``Watch``) and the observer's
    answers (``observer_decision``), on the modelled clock (seconds since launch)."""

    def __init__(self, spec: TrialSpec, observer: TrialObserver, outcome: Outcome) -> None:
        self.spec = spec
        self.observer = observer
        self.out = outcome
        self.ledger = ProgressLedger(launch_t=0.0)
        self.watch = Watch(spec.clocks, spec.stop, started_t=0.0)
        self.peak = 0.0
        self.last_line = ""

    def run(self) -> TrialResult:
        at, decision = self._supervise()
        return self._result(at, decision, self.ledger.snapshot())

    def _supervise(self) -> tuple[float, Decision]:
        """(when, why) the launcher stops watching: a clock firing between two events, the stop
        rule or the observer at an event, or the command's own exit."""
        state = self.ledger.snapshot()
        for t, is_start, span in self._events():
            fired = self._fired_before(state, t)
            if fired is not None:
                return fired
            self._apply(t, is_start, span)
            state = self.ledger.snapshot()
            decision = self.watch.check(state, t) or observer_decision(
                self.observer, self.spec, self._progress(state, t), state
            )
            if decision is not None:
                return t, decision
        end = self.out.end_s
        exit_code, signal_name = self._exit_status(end)
        how = f"killed by {signal_name}" if signal_name else f"exit code {exit_code}"
        exited = Decision(StopReason.EXITED, f"the command ended ({how})", state.open_phase)
        return self._fired_before(state, end) or (end, exited)

    def _fired_before(self, state: ProgressState, t: float) -> tuple[float, Decision] | None:
        """The clock that fires before ``t`` if nothing happens until then: (when, decision)."""
        due_t, _ = self.watch.due(state)
        if due_t >= t:
            return None
        decision = self.watch.check(state, due_t)
        assert decision is not None
        return due_t, decision

    def _events(self) -> list[tuple[float, bool, PhaseSpan]]:
        """(time, is_start, span): at one instant, phases end (innermost first) before the next start
        (outermost first)."""
        events = []
        for span in self.out.phases:
            events.append(((span.start_s, 1, span.depth), True, span))
            if span.end_s is not None:
                events.append(((span.end_s, 0, -span.depth), False, span))
        events.sort(key=lambda e: e[0])
        return [(key[0], is_start, span) for key, is_start, span in events]

    def _apply(self, t: float, is_start: bool, span: PhaseSpan) -> None:
        """What the twin's log line for this event tells the ledger and the observer."""
        name = span.name
        if is_start:
            self.ledger.phase_started(name, t)
            self.last_line = logfmt.started(name)
            return
        seconds = span.duration_s or 0.0
        self.last_line = logfmt.finished(name, seconds)
        if name == "step":  # "Finished: 'step', ..." is the step_end line
            self.observer.on_step(self.spec, self.ledger.step_finished(seconds, t), seconds)
            return
        self.ledger.phase_finished(name, seconds, t)
        self.observer.on_phase(self.spec, name, seconds)
        if name == "policy_train":
            mem = self.out.step_memory_gib.get(span.step)
            if mem and max(mem) > self.peak:
                self.peak = max(mem)
                self.observer.on_memory(self.spec, self.peak)

    def _progress(self, state: ProgressState, t: float) -> TrialProgress:
        return TrialProgress(
            elapsed_s=t,
            step_times_s=state.step_times_s,
            open_phase=state.open_phase,
            last_progress_s=t - (state.last_progress_t if state.last_progress_t is not None else 0.0),
            peak_mem_gib=self.peak or None,
        )

    def _exit_status(self, at: float) -> tuple[int | None, str | None]:
        """(exit code, signal) of the command had it ended by itself at ``at``."""
        failure = self.out.failure
        if failure is not None and failure.at_s <= at:
            return failure.exit_code, failure.signal_name
        return 0, None

    # -- the result --------------------------------------------------------------------------
    def _memory(self, until_s: float, open_phases: Sequence[str]) -> MemoryReport | None:
        """Per-GPU and per-phase peaks of the steps that started before ``until_s`` (None when none
        did); ``open_phases``: the ledger's open-phase stack at ``until_s`` (a failed run's ends in
        the phase it failed in)."""
        peaks = [0.0] * len(self.out.gpu_peak_gib)
        started = {s.step for s in self.out.phases if s.name == "step" and s.start_s <= until_s}
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
        return MemoryReport(
            source="model",
            gpus=tuple(
                GpuMemory(index=g, total_gib=H100_CAPACITY_GIB, peak_gib=round(p, 3)) for g, p in enumerate(peaks)
            ),
            phase_peak_frac={name: round(gib, 3) / H100_CAPACITY_GIB for name, gib in phase_gib.items()},
            phases_open_at_end=tuple(open_phases) or (OUTSIDE_PHASES,),
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
        for t, is_start, span in self._events():
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

    def _stacks(self, failure: SimFailure | None, decision: Decision) -> StackReport | None:
        """What py-spy would show at a stall the twin's injected hang caused: the hung rank asleep
        in its fault, the others in the all-gather it never joins."""
        if decision.reason not in (StopReason.STALL, StopReason.STARTUP):
            return None
        if failure is None or failure.kind != "hang_fault" or failure.rank is None:
            return StackReport()
        procs = []
        for g in range(len(self.out.gpu_peak_gib)):
            if g == failure.rank:
                frames = (Frame("_event", "nccl_tune/sim/worker.py", 221, "time.sleep(self.spec['timeout_s'] + 0.5)"),)
            else:
                frames = (
                    Frame("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 3800, ""),
                    Frame("_all_gather", "nccl_tune/sim/worker.py", 160, ""),
                )
            procs.append(
                ProcessStack(
                    WORKER_PID + g,
                    g,
                    "python -m nccl_tune.sim.worker",
                    (ThreadStack("MainThread", False, frames, main=True),),
                )
            )
        return StackReport(tuple(procs))

    def _facts(
        self, at: float, decision: Decision, state: ProgressState, exit_code: int | None, signal_name: str | None
    ) -> TrialFacts:
        out = self.out
        failure = out.failure if out.failure is not None and out.failure.at_s <= at else None
        return TrialFacts(
            logs=(LogFacts(LOG_FILE, lines=tuple(self._log_lines(at, failure, decision))),),
            stop_reason=decision.reason,
            stop_detail=decision.detail,
            open_phase=decision.open_phase or state.open_phase,
            exit_code=exit_code,
            signal_name=signal_name,
            steps_done=len(state.step_times_s),
            total_steps=self.spec.stop.total_steps,
            training_done=failure is None and decision.reason is StopReason.EXITED and bool(out.steps),
            stacks=self._stacks(failure, decision),
            progress=self.spec.progress,
            memory_knobs=self.spec.memory_knobs,
            trainer="skyrl",
        )

    def _result(self, at: float, decision: Decision, state: ProgressState) -> TrialResult:
        spec = self.spec
        steps = len(state.step_times_s)
        stopped_by_us = decision.reason is not StopReason.EXITED
        exit_code, signal_name = (None, "SIGTERM") if stopped_by_us else self._exit_status(at)
        wall = at + (min(TEARDOWN_S, spec.clocks.grace_s) if stopped_by_us else 0.0)
        verdict = decide(self._facts(at, decision, state, exit_code, signal_name))
        return TrialResult(
            number=spec.number,
            status=verdict.failure_class,
            verdict=verdict,
            stop_reason=decision.reason,
            exit_code=exit_code,
            signal_name=signal_name,
            step_times_s=state.step_times_s,
            warmup_steps=min(spec.stop.warmup_steps, steps),
            phase_max_s=state.phase_max_s,
            samples_per_step=spec.samples_per_step,
            memory=self._memory(at, state.open_phases),
            wall_s=wall,
            trial_dir=spec.trial_dir,
            modelled_gpu_s=wall * GPUS_PER_NODE,
        )
