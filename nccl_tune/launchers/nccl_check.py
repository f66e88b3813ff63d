"""The NCCL check: a trial's NCCL variables tried on the collectives alone before its command runs.

A setting NCCL refuses, or one that deadlocks a collective, fails a trial only after the trainer
has started: minutes of model loading and engine start-up, then a hang that costs the stall
timeout as well. Those failures need no trainer to show. Before a trial whose NCCL values this
run has not checked yet, ``CheckingLauncher`` runs ``nccl_check_worker`` (one rank per GPU of the
node, under ``torch.distributed.run``, with the trial's environment) through the launcher it wraps,
so under the same supervision: progress read from the check's round lines, its own start-up and
stall deadlines, teardown, the same verdict route. Then:

- the check passed: the trial runs as it would have, and its result carries the check's wall time
  and GPU time apart from its own (``checked``: a check is paid once per set of NCCL values, not
  by every trial, so it is no part of a trial's fixed cost);
- the check failed (refused, hung, wrong sums): the trial ends there, recorded with the check's
  class, evidence and cost; its command never starts. Its verdict says it was the check. Only once
  a check has passed in this run, though: before that, the check itself may be what fails on this
  node (a torch that cannot start the ranks, a port taken), so the trial runs anyway, and if it
  finishes, no further check runs and the run says why (``Launcher.notes``).

Each distinct set of NCCL values is checked once per tuner run: a set that passed is not checked
again. It runs only where the trials' Python's torch can run NCCL on their node's GPUs
(``Launcher.nccl_check_support``: the local launcher asks ``nccl_unusable`` once, in a child
process; the Ray launcher has each trial node ask it of itself, and the check then runs on a free
node, under that node's Python, like a trial; ``with_nccl_check`` says why it is off otherwise). A failed set is
not remembered here: the failure model learns from the recorded trial, like
from any other failure, and does not propose it again. The check exercises one node's GPUs:
settings that only break across nodes (the network transport) still fail in the trial itself.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import Evidence, FailureClass
from nccl_tune.launchers.base import Launcher, TrialObserver, TrialProgress
from nccl_tune.launchers.nccl_check_worker import (
    REPEATS as CHECK_REPEATS,
)
from nccl_tune.launchers.nccl_check_worker import (
    ROUND_PATTERN,
    ROUND_START_PATTERN,
)
from nccl_tune.launchers.nccl_check_worker import (
    ROUNDS as CHECK_ROUNDS,
)
from nccl_tune.launchers.trial_files import write_result
from nccl_tune.trial import Clocks, ProgressRules, StopReason, StopRule, TrialResult, TrialSpec

CHECK_DIR = "nccl-check"
"""The check's folder inside the trial's (its output, spec and result)."""
CHECK_STARTUP_S = 120.0
"""Launch to the first round's start, and the first round itself (NCCL sets up its communicators
in it), at most, until a check has passed. Later checks allow ``stall_multiplier`` times the
longest start-up and the longest round a passed check took (at least ``CHECK_STALL_FLOOR_S``)."""
CHECK_STALL_FLOOR_S = 20.0
"""Silence allowed in a round at least, once a round's length is known (a round takes well under a
second on one node): a round that hangs ends the check after this long, not after the start-up
timeout."""
CHECK_TIMEOUT_S = 300.0


def nccl_values(spec: TrialSpec) -> tuple[tuple[str, str | None], ...]:
    """The trial's NCCL variables as set (``None``: removed), the key a check is remembered by (the
    tool's own ``NCCL_TUNE_*`` variables are no NCCL setting)."""
    return tuple(
        sorted((k, v) for k, v in spec.env.items() if k.startswith("NCCL_") and not k.startswith("NCCL_TUNE_"))
    )


def visible_gpus(gpus: int, visible: str | None) -> int:
    """Of ``gpus``, as many as a ``CUDA_VISIBLE_DEVICES`` value shows (unset or empty: all of them;
    an empty value is Ray's for a task that holds no GPU, dropped before a trial starts)."""
    shown = [d for d in (visible or "").split(",") if d.strip()]
    return min(gpus, len(shown)) if shown else gpus


def check_gpus(spec: TrialSpec, gpus: int) -> int:
    """Ranks of ``spec``'s check: the GPUs its launcher's trials see (``CheckSupport.gpus``), fewer
    when the trial's own environment narrows them."""
    return visible_gpus(gpus, spec.env.get("CUDA_VISIBLE_DEVICES"))


WORKER = ("-m", "nccl_tune.launchers.nccl_check_worker")
"""What ``torch.distributed.run`` starts on each rank."""


def check_spec(
    spec: TrialSpec,
    gpus: int,
    backend: str,
    learned: Mapping[str, float],
    worker: tuple[str, ...] = WORKER,
    startup_timeout_s: float = CHECK_STARTUP_S,
    python: str = sys.executable,
    stall_floor_s: float = CHECK_STALL_FLOOR_S,
) -> TrialSpec:
    """The check of ``spec``: same study, number, values, environment and markers; its own command
    (``python`` running ``torch.distributed.run``), folder, clocks (``learned``: the longest phases of
    the checks that passed), stop rule and progress rule."""
    argv = (
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={gpus}",
        *worker,
        "--rounds",
        str(CHECK_ROUNDS),
        "--backend",
        backend,
        "--repeats",
        str(CHECK_REPEATS if backend == "nccl" else 1),  # gloo, on CPUs, only exercises the machinery
    )
    clocks = Clocks(
        startup_timeout_s=startup_timeout_s,
        stall_timeout_s=startup_timeout_s,
        stall_floor_s=stall_floor_s,
        stall_multiplier=spec.clocks.stall_multiplier,
        trial_timeout_s=CHECK_TIMEOUT_S,
        grace_s=spec.clocks.grace_s,
    ).learned(learned)
    return TrialSpec(
        study=spec.study,
        number=spec.number,
        params=spec.params,
        argv=argv,
        env=spec.env,
        trial_dir=spec.trial_dir / CHECK_DIR,
        clocks=clocks,
        stop=StopRule(warmup_steps=1, measured_steps=CHECK_ROUNDS - 1),
        progress=ProgressRules(step_end=(ROUND_PATTERN,), phase_start=ROUND_START_PATTERN),
        cwd=spec.cwd,
        scope=spec.scope,
        nccl_check=True,
    )


def checked(result: TrialResult, check: TrialResult) -> TrialResult:
    """``result`` of the trial, with the time and GPU time of the check that passed before it."""
    return replace(result, nccl_check_s=check.wall_s, nccl_check_gpu_s=check.gpu_s)


def failed_check(spec: TrialSpec, check: TrialResult) -> TrialResult:
    """The trial's result when its check failed: the check's class, stop, cost and logs; the evidence
    opens with a line saying the trial's command never started. Nothing of the trial's own is
    measured: no steps, phases or memory (the check's rounds and its 2 GiB are not the config's)."""
    values = ", ".join(f"{k}={'unset' if v is None else v}" for k, v in nccl_values(spec)) or "none set"
    head = Evidence(
        0,
        f"the NCCL check (the collectives alone with this trial's NCCL variables: {values}) failed "
        f"as {check.status.value}; the trial's command was not started",
        "nccl-tune",
    )
    verdict = replace(
        check.verdict,
        evidence=(head, *check.verdict.evidence),
        advice=check.verdict.advice or "these NCCL values fail without the trainer: leave them out",
    )
    return replace(
        check,
        verdict=verdict,
        trial_dir=spec.trial_dir,
        samples_per_step=spec.samples_per_step,
        step_times_s=(),
        step_rates=(),
        warmup_steps=0,
        phase_max_s={},
        progress_preset=None,
        memory=None,
        nccl_check_failed=True,
    )


class _Interruptible(TrialObserver):
    """What a check tells the trial's observer: nothing, except that the tuner is being interrupted
    (the check is not the trial: it is neither shown nor stopped early)."""

    def __init__(self, observer: TrialObserver | None) -> None:
        self.observer = observer

    def should_stop(self, spec: TrialSpec, progress: TrialProgress) -> StopReason | None:
        if self.observer is None:
            return None
        reason = self.observer.should_stop(spec, progress)
        return reason if reason is StopReason.INTERRUPTED else None


class CheckingLauncher(Launcher):
    """``inner`` with the NCCL check before each trial whose NCCL values were not checked yet."""

    def __init__(
        self,
        inner: Launcher,
        gpus: int,
        backend: str = "nccl",
        worker: tuple[str, ...] = WORKER,
        startup_timeout_s: float = CHECK_STARTUP_S,
        python: str = sys.executable,
        stall_floor_s: float = CHECK_STALL_FLOOR_S,
    ) -> None:
        """``gpus``: ranks of the check (the node's GPUs); ``backend``: ``nccl``, or ``gloo`` where no
        GPU is (the machinery without NCCL); ``worker``: what each rank runs (``WORKER``, or a program
        of the same lines); ``startup_timeout_s``: launch to the first round, until a check has passed;
        ``python``: the interpreter the ranks run under where ``inner`` runs its trials;
        ``stall_floor_s``: the silence inside a round that ends a check, at least."""
        self.inner = inner
        self.python = python
        self.name = inner.name
        self.gpus = gpus
        self.backend = backend
        self.worker = worker
        self.startup_timeout_s = startup_timeout_s
        self.stall_floor_s = stall_floor_s
        self.passed: set[tuple[tuple[str, str | None], ...]] = set()
        self.learned: dict[str, float] = {}
        """Longest phases (start-up, round) of the checks that passed: their clocks adapt to them."""
        self.trusted = False
        """A check has passed in this run. Until one has, a failed check does not end its trial (the
        check itself may be what fails here): the trial runs, and if it finishes, checks stop."""
        self.off: str | None = None
        """Why checks stopped, once they did."""
        self._notes: list[str] = []
        self._lock = threading.Lock()

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        key = nccl_values(spec)
        with self._lock:
            skip = self.off is not None or key in self.passed
        if skip:
            return self.inner.run(spec, observer)
        check = self.measure(spec, observer)
        if check.status is FailureClass.INTERRUPTED:
            return replace(check, trial_dir=spec.trial_dir)
        if (
            check.status is not FailureClass.OK and self.trusted
        ):  # a check passed in this run: the check works here, these values failed it
            result = failed_check(spec, check)
            write_result(result, spec.trial_dir)
            (observer or TrialObserver()).on_end(spec, result)
            return result
        self.inner.gate()
        result = checked(self.inner.run(spec, observer), check)
        if check.status is not FailureClass.OK and result.status is FailureClass.OK:
            self._distrust(spec, check)
        return result

    def measure(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """The check of ``spec`` alone, its command never started (before its trial, or the NCCL
        sweep's timing of a set of NCCL values: ``tuner.records.nccl_sweep``). A set that passes is not
        checked again before its trial."""
        with self._lock:
            learned = dict(self.learned)
        gpus = check_gpus(spec, self.gpus)
        check = self.inner.run(
            check_spec(
                spec, gpus, self.backend, learned, self.worker, self.startup_timeout_s, self.python, self.stall_floor_s
            ),
            _Interruptible(observer),
        )
        if check.status is FailureClass.OK:
            self._passed(nccl_values(spec), check)
        return check

    def _passed(self, key: tuple[tuple[str, str | None], ...], check: TrialResult) -> None:
        with self._lock:
            self.trusted = True
            self.passed.add(key)
            for phase, seconds in check.phase_max_s.items():
                self.learned[phase] = max(seconds, self.learned.get(phase, 0.0))

    def _distrust(self, spec: TrialSpec, check: TrialResult) -> None:
        """The check failed where the trial then ran: it does not tell here (a broken install, a port
        taken, GPUs the trial does not use); no further check runs."""
        with self._lock:
            self.off = (
                f"NCCL check off: trial {spec.number}'s check failed ({check.status.value}; "
                f"{spec.trial_dir / CHECK_DIR}) while the trial itself ran, so the check does not tell on this node"
            )
            self._notes.append(self.off)

    def notes(self) -> list[str]:
        with self._lock:
            out, self._notes = self._notes, []
        return out + self.inner.notes()

    # -- everything else is the inner launcher's ---------------------------------------------------
    def prepare(self, spec: TrialSpec) -> None:
        self.inner.prepare(spec)

    def before_study(self) -> None:
        self.inner.before_study()

    def gate(self) -> None:
        self.inner.gate()

    def reap(self, study: str) -> list[str]:
        return self.inner.reap(study)

    def tuner_alive(self, pid: int) -> bool:
        return self.inner.tuner_alive(pid)

    def close(self) -> None:
        self.inner.close()


def with_nccl_check(launcher: Launcher, mode: str, sets_nccl: bool) -> tuple[Launcher, str | None]:
    """``launcher`` with the NCCL check as ``--nccl-check`` ``mode`` asks (``sets_nccl``: the space
    sets NCCL variables), and a line saying whether it runs (None when it was not asked for). ``on``
    where it cannot run raises ``NcclTuneError`` naming why."""
    if mode == "off" or (mode == "auto" and not sets_nccl):
        return launcher, None
    support = launcher.nccl_check_support()
    if support.gpus is None:
        if mode == "on":
            raise NcclTuneError(
                f"--nccl-check on: the NCCL check cannot run here ({support.why_not}); use --nccl-check auto or off"
            )
        return launcher, f"NCCL check off: {support.why_not}"
    return CheckingLauncher(launcher, support.gpus, python=support.python), (
        f"NCCL check: each new set of NCCL values runs on the collectives alone ({support.gpus} GPUs, {CHECK_ROUNDS} rounds) "
        "before its trial; --nccl-check off skips it"
    )


PROBE_TIMEOUT_S = 120.0
_PROBE = (
    "import torch, torch.distributed as d\n"
    "print('cuda', torch.cuda.is_available() and torch.cuda.device_count() > 0, 'nccl', d.is_available() and d.is_nccl_available())"
)


def nccl_unusable(python: str = sys.executable, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """Why ``python``'s torch cannot run the check's NCCL ranks (a CPU build, no NCCL, no torch), or
    ``""`` when it can. Asked in a child process, once per run, so the tuner never initialises CUDA."""
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} could not be asked whether its torch runs NCCL ({type(exc).__name__})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{python} cannot import torch ({last})"
    if "cuda True" not in done.stdout:
        return f"the torch of {python} sees no CUDA device (a CPU build?)"
    if "nccl True" not in done.stdout:
        return f"the torch of {python} has no NCCL"
    return ""
