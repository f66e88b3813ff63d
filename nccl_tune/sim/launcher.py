"""``ModelLauncher``: runs a trial against the cost model, in process, without starting anything.

It reads the trial as the twin program would (the ``key=value`` tokens of ``spec.argv`` on top of
the overrides of ``examples/run_skyrl_sql_sim.sh``; ``spec.env`` on top of the launcher's
environment, ``None`` removing a variable), models the run (:func:`nccl_tune.sim.evaluate`) and
then supervises it the way the local launcher supervises a process, on the modelled clock: the
start-up deadline, the stall deadline of the open phase (``spec.clocks``), the trial budget, the
stop rule, and the observer's early stop and interrupt. All times in the result are modelled
seconds of the real node (``wall_s`` included); ``modelled_gpu_s`` is ``wall_s`` times the node's
8 GPUs.

Classification follows the local launcher's rules: all measured steps -> ``ok``; the command
exited -> the root cause of its failure; a stall -> the failure already in the log if any,
else ``hang``; the budget or an early stop -> ``budget``.
"""

from __future__ import annotations

import os
import re
import zlib
from datetime import datetime, timedelta
from typing import Mapping, Sequence

from nccl_tune.failure import Evidence, FailureClass, Verdict
from nccl_tune.launchers.base import Launcher, TrialObserver, TrialProgress
from nccl_tune.launchers.records import write_result
from nccl_tune.sim import logfmt
from nccl_tune.sim.config import parse_overrides
from nccl_tune.sim.cost_model import GPUS_PER_NODE, H100_CAPACITY_GIB
from nccl_tune.sim.evaluate import Outcome, PhaseSpan, SimFailure, evaluate
from nccl_tune.sim.refusal import HYDRA_FULL_ERROR_HINT, SimConfigError
from nccl_tune.sim.script import skyrl_sql_overrides
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult, TrialSpec

CONFIG_ERROR_WALL_S = 8.0
"""Modelled seconds a refused configuration costs (Python start-up, Hydra's parse)."""
TEARDOWN_S = 5.0
"""Modelled seconds from the launcher's stop to no process left (SIGTERM to a Ray job)."""
_OVERRIDE = re.compile(r"^(?:\+\+|\+|~)?[A-Za-z_][\w\-]*(?:\.[\w\-]+)*(?:=|$)")
_BASE_TIME = datetime(2026, 3, 2, 10, 0, 0)


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
    ) -> None:
        """``base_overrides``: the command's own overrides (default: the twin script's);
        ``env``: the environment trials start from (default: this process's);
        ``write_result``: also write ``result.json`` into each trial folder."""
        self.base_env = dict(os.environ if env is None else env)
        self.base_overrides = (
            list(base_overrides) if base_overrides is not None else skyrl_sql_overrides(self.base_env.get("HOME"))
        )
        self.write_result = write_result

    def trial_env(self, spec: TrialSpec) -> dict[str, str]:
        """The environment the trial's command would see."""
        env = dict(self.base_env)
        for key, value in spec.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        return env

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """Model the trial to its end; never raises."""
        observer = observer or TrialObserver()
        observer.on_start(spec, None)
        try:
            result = self._run(spec, observer)
        except Exception as exc:  # noqa: BLE001 - the launcher contract: failures are values
            result = TrialResult(
                number=spec.number,
                status=FailureClass.CRASH,
                verdict=Verdict(
                    FailureClass.CRASH,
                    evidence=(Evidence(1, f"model launcher error: {type(exc).__name__}: {exc}", "model"),),
                    advice="the cost model could not evaluate this trial; report it with the trial's argv and env",
                ),
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
        env = self.trial_env(spec)
        tokens = self.base_overrides + override_tokens(spec.argv)
        try:
            cfg = parse_overrides(tokens, env)
        except SimConfigError as exc:
            return self._refused(spec, exc)
        seed = cfg.env.sim_seed if cfg.env.sim_seed is not None else zlib.crc32(spec.marker.encode())
        outcome = evaluate(cfg, seed=seed, steps=spec.stop.total_steps)
        return _Supervision(spec, observer, outcome).run()

    def _refused(self, spec: TrialSpec, exc: SimConfigError) -> TrialResult:
        lines = [ln for ln in exc.lines if ln.strip() and ln != HYDRA_FULL_ERROR_HINT]
        if exc.kind == "validation":
            lines = [lines[-1], *lines[:-1]]
        evidence = tuple(Evidence(i + 1, ln, "model") for i, ln in enumerate(lines[:8]))
        wall = CONFIG_ERROR_WALL_S
        return TrialResult(
            number=spec.number,
            status=FailureClass.CONFIG_ERROR,
            verdict=Verdict(FailureClass.CONFIG_ERROR, evidence=evidence, advice=str(exc)),
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
    """The local launcher's clocks and stop rule, applied to a modelled run."""

    def __init__(self, spec: TrialSpec, observer: TrialObserver, outcome: Outcome) -> None:
        self.spec = spec
        self.observer = observer
        self.out = outcome
        self.clocks = spec.clocks
        self.open: list[str] = []
        self.step_times: list[float] = []
        self.phase_max: dict[str, float] = {}
        self.peak = 0.0
        self.last_progress = 0.0
        self.first = True
        self.last_line = ""

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

    def _deadline(self) -> tuple[float, StopReason]:
        if self.first:
            return self.clocks.startup_timeout_s, StopReason.STARTUP
        return self.clocks.stall_deadline_s(self.open[-1] if self.open else None), StopReason.STALL

    def _check_gap(self, t: float) -> tuple[float, StopReason] | None:
        """A clock that fires before ``t``: (when, why)."""
        limit, reason = self._deadline()
        fire = self.last_progress + limit
        budget = self.clocks.trial_timeout_s
        if min(fire, budget) >= t:
            return None
        return (budget, StopReason.BUDGET) if budget <= fire else (fire, reason)

    def run(self) -> TrialResult:
        spec = self.spec
        stop: tuple[float, StopReason] | None = None
        for t, is_start, span in self._events():
            stop = self._check_gap(t)
            if stop is not None:
                break
            if is_start:
                self.open.append(span.name)
                self.last_line = logfmt.started(span.name)
            else:
                self._finished(span, t)
            self.last_progress, self.first = t, False
            if len(self.step_times) >= spec.stop.total_steps:
                stop = (t, StopReason.MEASURED)
                break
            asked = self.observer.should_stop(
                spec,
                TrialProgress(
                    elapsed_s=t,
                    step_times_s=tuple(self.step_times),
                    open_phase=self.open[-1] if self.open else None,
                    last_progress_s=0.0,
                    peak_mem_gib=self.peak or None,
                ),
            )
            if asked in ("interrupted", "early_stop"):
                stop = (t, StopReason.INTERRUPTED if asked == "interrupted" else StopReason.EARLY_STOP)
                break
        if stop is None:
            stop = self._check_gap(self.out.end_s) or (self.out.end_s, StopReason.EXITED)
        return self._result(*stop)

    def _finished(self, span: PhaseSpan, t: float) -> None:
        name = span.name
        if name in self.open:
            idx = len(self.open) - 1 - self.open[::-1].index(name)
            del self.open[idx]
        seconds = span.duration_s or 0.0
        self.phase_max[name] = max(self.phase_max.get(name, 0.0), seconds)
        self.last_line = logfmt.finished(name, seconds)
        self.observer.on_phase(self.spec, name, seconds)
        if name == "policy_train":
            mem = self.out.step_memory_gib.get(span.step)
            if mem and max(mem) > self.peak:
                self.peak = max(mem)
                self.observer.on_memory(self.spec, self.peak)
        if name == "step" and span.step > 0:
            self.step_times.append(seconds)
            self.observer.on_step(self.spec, len(self.step_times) - 1, seconds)

    # -- the result --------------------------------------------------------------------------
    def _memory(self, until_s: float) -> MemoryReport | None:
        """Per-GPU peaks of the steps that started before ``until_s`` (None when none did)."""
        peaks = [0.0] * len(self.out.gpu_peak_gib)
        started = {s.step for s in self.out.phases if s.name == "step" and s.start_s <= until_s}
        if not started & set(self.out.step_memory_gib):
            return None
        for step, mem in self.out.step_memory_gib.items():
            if step in started:
                peaks = [max(a, b) for a, b in zip(peaks, mem)]
        return MemoryReport(
            source="model",
            gpus=tuple(GpuMemory(index=g, total_gib=H100_CAPACITY_GIB, peak_gib=round(p, 3)) for g, p in enumerate(peaks)),
        )

    def _verdict(self, cls: FailureClass, failure: SimFailure | None, reason: StopReason, at: float) -> Verdict:
        if cls is FailureClass.OK:
            return Verdict(FailureClass.OK)
        phase = (failure.phase if failure else None) or (self.open[-1] if self.open else None)
        rank = failure.rank if failure is not None else None
        if failure is not None and cls is not FailureClass.HANG:
            # Root cause first; the other ranks' watchdog lines only once they have timed out.
            lines = [ln for ln in failure.evidence if reason is StopReason.EXITED or "Watchdog" not in ln]
            if cls is FailureClass.COLLECTIVE_TIMEOUT:
                lines.sort(key=lambda ln: "Watchdog" not in ln)
            evidence = tuple(Evidence(i + 1, ln, "model") for i, ln in enumerate(lines))
            return Verdict(cls, rank=rank, evidence=evidence, advice=failure.advice, phase=phase)
        when = _BASE_TIME + timedelta(seconds=self.last_progress)
        line = logfmt.trainer_line(phase or "step", self.last_line or "(no output)", when=when, color=False)
        lines = [f"({logfmt.ENTRYPOINT_ACTOR} pid=400000) {line}"]
        if failure is not None:
            lines += [ln for ln in failure.evidence if "Watchdog" not in ln]
        evidence = tuple(Evidence(i + 1, ln, "model") for i, ln in enumerate(lines))
        if cls is FailureClass.HANG:
            advice = (
                f"no progress for {at - self.last_progress:.0f} s in '{phase}'"
                + (f": {failure.advice}" if failure is not None else ": if this phase is known to be slow, raise the stall timeout")
            )
        elif cls is FailureClass.BUDGET:
            advice = "stopped by the trial budget or for being slower than the best trial so far"
        elif cls is FailureClass.CRASH:
            advice = (
                f"the command exited after {len(self.step_times)} of {self.spec.stop.total_steps} steps: it runs only "
                f"{self.out.total_steps} steps (epochs x kept prompts // train_batch_size)"
            )
        else:
            advice = ""
        return Verdict(cls, rank=rank, evidence=evidence, advice=advice, phase=phase)

    def _result(self, at: float, reason: StopReason) -> TrialResult:
        spec, out = self.spec, self.out
        failure = out.failure if out.failure is not None and out.failure.at_s <= at else None
        exit_code: int | None = None
        signal_name: str | None = None
        if reason is StopReason.MEASURED:
            cls = FailureClass.OK
        elif reason is StopReason.EXITED:
            if failure is not None:
                cls = FailureClass.COLLECTIVE_TIMEOUT if failure.failure_class is FailureClass.HANG else failure.failure_class
                exit_code, signal_name = failure.exit_code, failure.signal_name
            else:
                exit_code = 0
                cls = FailureClass.OK if len(self.step_times) >= spec.stop.total_steps else FailureClass.CRASH
        elif reason in (StopReason.STALL, StopReason.STARTUP):
            cls = failure.failure_class if failure is not None else FailureClass.HANG
        elif reason is StopReason.INTERRUPTED:
            cls = FailureClass.INTERRUPTED
        else:
            cls = FailureClass.BUDGET
        stopped_by_us = reason is not StopReason.EXITED
        wall = at + (min(TEARDOWN_S, spec.clocks.grace_s) if stopped_by_us else 0.0)
        if stopped_by_us:
            signal_name = "SIGTERM"
        return TrialResult(
            number=spec.number,
            status=cls,
            verdict=self._verdict(cls, failure, reason, at),
            stop_reason=reason,
            exit_code=exit_code,
            signal_name=signal_name,
            step_times_s=tuple(self.step_times),
            warmup_steps=min(spec.stop.warmup_steps, len(self.step_times)),
            phase_max_s=dict(self.phase_max),
            samples_per_step=spec.samples_per_step,
            memory=self._memory(at),
            wall_s=wall,
            trial_dir=spec.trial_dir,
            modelled_gpu_s=wall * GPUS_PER_NODE,
        )
