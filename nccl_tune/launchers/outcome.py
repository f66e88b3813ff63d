"""Deciding a finished trial's verdict from why it stopped and what its log says.

The rules (the log classifier is ``nccl_tune.diagnose.classify``):

- measured: ``ok``;
- exited 0 after every step: ``ok``; exited 0 too early: the log's verdict if it finds a failure,
  ``config_error`` when the command said training was done (its data ran out of batches), else
  ``crash`` ("exited after N of M steps");
- exited non-zero or by a signal: the log's verdict (exit 126/127, "command not found", with no
  better cause: ``config_error``);
- stall or start-up deadline: a root cause found in the log wins (an OOM that left the other
  ranks waiting), otherwise ``hang`` with the last lines and the open phase;
- budget or early stop: ``budget``; interrupted: ``interrupted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from nccl_tune.failure import OK_VERDICT, Evidence, FailureClass, Verdict
from nccl_tune.launchers.logstream import LogSummary
from nccl_tune.launchers.supervise import Decision
from nccl_tune.trial import StopReason

ClassifyFile = Callable[..., Verdict]
"""``classify_file(path, *, exit_code, signal_name, fr_dumps, source, host_mem_peak_frac) -> Verdict``."""

ROOT_CAUSES = frozenset(
    {
        FailureClass.OOM,
        FailureClass.HOST_OOM,
        FailureClass.NCCL_ERROR,
        FailureClass.CUDA_ERROR,
        FailureClass.INIT_FAILURE,
        FailureClass.CONFIG_ERROR,
        FailureClass.COLLECTIVE_TIMEOUT,
        FailureClass.COLLECTIVE_MISMATCH,
    }
)
"""Classes found in a log that explain a stall better than "hang"."""

HANG_TAIL_LINES = 8
OWN_SOURCE = "nccl-tune"


@dataclass(frozen=True)
class Ending:
    """How a trial's command ended, as the launcher saw it."""

    decision: Decision
    exit_code: int | None
    signal_name: str | None
    steps_done: int
    total_steps: int
    log_path: Path
    summary: LogSummary
    fr_dumps: tuple[Path, ...] = ()
    host_mem_peak_frac: float | None = None
    rules_hint: str = ""
    """The step rule, named in the advice when no step line was ever seen."""
    training_done: bool = False
    """The command printed its end-of-training line (``ProgressRules.training_done``)."""


def classify_with_diagnose(path: Path, **kwargs: object) -> Verdict:
    """``nccl_tune.diagnose.classify.classify_file``, imported when first needed."""
    from nccl_tune.diagnose.classify import classify_file

    return classify_file(path, **kwargs)


def _own(detail: str) -> Evidence:
    return Evidence(0, detail, OWN_SOURCE)


def _tail(summary: LogSummary, n: int) -> tuple[Evidence, ...]:
    lines = [e for e in summary.tail if e.text.strip()]
    return tuple(lines[-n:])


def _signal_from_exit(exit_code: int | None) -> str | None:
    """A shell reports a child killed by signal N as exit 128+N."""
    import signal

    if exit_code is None or not 128 < exit_code < 128 + 65:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


def _classify(classify: ClassifyFile, end: Ending, *, with_exit: bool) -> Verdict:
    kwargs = dict(fr_dumps=end.fr_dumps, source=end.log_path.name, host_mem_peak_frac=end.host_mem_peak_frac)
    if with_exit:
        kwargs.update(exit_code=end.exit_code, signal_name=end.signal_name or _signal_from_exit(end.exit_code))
    return classify(end.log_path, **kwargs)


def decide(end: Ending, classify: ClassifyFile) -> Verdict:
    """The verdict for a trial that has been torn down (see the module docstring)."""
    reason = end.decision.reason
    if reason is StopReason.MEASURED:
        return OK_VERDICT
    if reason in (StopReason.BUDGET, StopReason.EARLY_STOP):
        advice = (
            "alive and progressing, but slower than the best trial so far"
            if reason is StopReason.EARLY_STOP
            else "alive and progressing, but too slow for the trial budget (--trial-timeout)"
        )
        return Verdict(FailureClass.BUDGET, evidence=(_own(end.decision.detail),), advice=advice, phase=end.decision.open_phase)
    if reason is StopReason.INTERRUPTED:
        return Verdict(
            FailureClass.INTERRUPTED,
            evidence=(_own(end.decision.detail),),
            advice="the tuner was interrupted; resume the study with the same --study",
            phase=end.decision.open_phase,
        )
    if reason in (StopReason.STALL, StopReason.STARTUP):
        return _stalled(end, _classify(classify, end, with_exit=False))
    if end.exit_code == 0 and end.signal_name is None and end.steps_done >= end.total_steps:
        return OK_VERDICT  # a clean exit after every step: nothing to look for in the log
    return _exited(end, _classify(classify, end, with_exit=True))


def _stalled(end: Ending, found: Verdict) -> Verdict:
    if found.failure_class in ROOT_CAUSES:
        return found
    detail = end.decision.detail
    evidence = (_own(detail),) + _tail(end.summary, HANG_TAIL_LINES)
    if found.failure_class is FailureClass.CRASH:  # a process died and the rest waited for it
        evidence += found.evidence[:3]
    if end.decision.reason is StopReason.STARTUP:
        hint = f" ({end.rules_hint})" if end.rules_hint and end.steps_done == 0 else ""
        advice = (
            "no progress line before the start-up deadline: the command is stuck starting (engines, rendezvous) "
            f"or prints no line the progress rules match{hint}; raise --startup-timeout if start-up is just slow"
        )
    else:
        phase = f" in '{end.decision.open_phase}'" if end.decision.open_phase else ""
        advice = (
            f"the command stopped making progress{phase}; `nccl-tune diagnose` on the trial folder reads its Flight "
            "Recorder dumps for the rank behind; raise --stall-timeout only if this phase is legitimately that slow"
        )
    return Verdict(FailureClass.HANG, found.rank, evidence, advice, phase=end.decision.open_phase)


def _exited(end: Ending, found: Verdict) -> Verdict:
    code, sig = end.exit_code, end.signal_name
    if code == 0 and sig is None:
        if found.failure_class is not FailureClass.OK:
            return found
        detail = f"exited with code 0 after {end.steps_done} of {end.total_steps} steps"
        if end.training_done:
            return Verdict(
                FailureClass.CONFIG_ERROR,
                evidence=(_own(f"training finished by itself after {end.steps_done} of {end.total_steps} steps"),)
                + _tail(end.summary, 3),
                advice="with these values the run has fewer steps than a trial measures (e.g. a train batch larger "
                "than the prompts the data keeps): lower the batch size or --steps",
            )
        if end.steps_done == 0 and end.rules_hint:
            advice = f"no step line was recognised: check the search space's progress rules ({end.rules_hint})"
        else:
            advice = "the command ended before the measured steps: let it run more steps or lower --steps"
        return Verdict(FailureClass.CRASH, evidence=(_own(detail),) + _tail(end.summary, 5), advice=advice)
    how = f"killed by {sig}" if sig else f"exited with code {code}"
    if code in (126, 127) and found.failure_class in (FailureClass.OK, FailureClass.CRASH):
        words = ("not found", "Permission denied", "cannot execute")
        lines = [e for e in end.summary.first_errors + end.summary.tail if any(w in e.text for w in words)]
        return Verdict(
            FailureClass.CONFIG_ERROR,
            evidence=(_own(f"{how}: a program the command runs could not be started"),) + tuple(dict.fromkeys(lines))[:3],
            advice="the command could not run a program (exit 126/127): fix the command, its PATH or its permissions",
        )
    if found.failure_class is FailureClass.OK:
        return Verdict(
            FailureClass.CRASH,
            evidence=(_own(f"{how} after {end.steps_done} of {end.total_steps} steps"),) + _tail(end.summary, 5),
            advice="the command died without an error the classifier knows; read the last lines of output.log",
        )
    return found
