"""Running one admitted trial: its spec, the node gate, the launcher, and telling the study.

Whatever fails between Optuna's ask and the command's start (the node gate gives up, the trial
folder cannot be written, a bug) leaves the asked trial told: FAIL with the reason in its
``abandoned`` attribute, its values asked for again when the failure was not theirs. The study
resumes cleanly; no trial stays RUNNING without a folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import TrialState

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import Launcher
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult, TrialSpec
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.failure_context import study_advice
from nccl_tune.tuner.records.gpu_size import sized_among
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.nccl_sweep import load as load_sweep
from nccl_tune.tuner.records.semantics import study_reference, study_user_env
from nccl_tune.tuner.records.stability import (
    Candidate,
    baseline,
    changes_semantics,
    keeps_semantics,
    select_winner,
    speed_only,
)
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.records.telling import near_wall, requeue, tell_abandoned, tell_result
from nccl_tune.tuner.search.failure_model import FlakyRule, flaky_rule
from nccl_tune.tuner.search.throughput_model import ThroughputModel
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag, TunerObserver
from nccl_tune.tuner.trials.screening import incumbent_bar
from nccl_tune.tuner.trials.steps import MAX_MEASURED_STEPS, next_measured_steps
from nccl_tune.tuner.trials.trial_builder import build_trial_spec


def detected_preset(history: Sequence[TrialRecord]) -> str | None:
    """The progress preset an earlier trial's output was recognised as (the first one found)."""
    return next((r.result.progress_preset for r in history if r.result and r.result.progress_preset), None)


FLUSH_HINT = (
    "every trial runs with PYTHONUNBUFFERED=1; make a command that still buffers flush each line "
    "(python -u, stdbuf -oL, a logger that flushes) or print each step's time"
)


def buffered_note(result: TrialResult) -> str | None:
    """What to tell when ``result``'s step lines came in bursts (block-buffered output), else None."""
    if not result.late_steps:
        return None
    head = (
        f"trial {result.number}: its step lines arrived in bursts ({result.late_steps} of "
        f"{len(result.step_times_s)} together with the one before), as block-buffered output does"
    )
    if not result.timed and result.throughput_per_s is None:
        return (
            f"{head} and carry no time of their own: the wall clock cannot time them, so the trial has no "
            f"throughput and is not ranked; {FLUSH_HINT}"
        )
    if not result.timed:
        return f"{head}: its throughput is the rate its lines printed, the wall clock could not time them; {FLUSH_HINT}"
    return f"{head}: they were timed by the timestamps they carry, not by the wall clock; {FLUSH_HINT}"


class TrialRunner:
    """Runs admitted trials of one study through its launcher."""

    def __init__(
        self,
        space: SearchSpace,
        held: HeldParameters,
        settings: RunSettings,
        study_name: str,
        launcher: Launcher,
        display: Display,
        interrupt: InterruptFlag,
        host: str,
    ) -> None:
        self.space = space
        self.held = held
        self.settings = settings
        self.study_name = study_name
        self.launcher = launcher
        self.display = display
        self.interrupt = interrupt
        self.host = host
        self.launched = 0
        self.told_measured_steps = settings.steps is not None
        self.told_command_cap = settings.steps is not None
        """True once the run has told that the measured steps follow the noise (or --steps fixed them)."""
        self.told_buffered = False
        """True once the run has told that a trial's output came in bursts (``buffered_note``)."""

    def spec_for(
        self,
        number: int,
        values: Mapping[str, Any],
        history: Sequence[TrialRecord],
        steps: int | None = None,
        forced: bool = False,
    ) -> TrialSpec:
        """The spec of trial ``number``; ``steps``: its measured steps, as ``--steps`` would fix them
        (None: what ``--steps`` or the study's noise says); ``forced``: at its longest batch."""
        return build_trial_spec(
            self.space,
            self.settings if steps is None else replace(self.settings, steps=steps),
            study=self.study_name,
            number=number,
            values=values,
            context_pins=self.held.context,
            history=history,
            detected_preset=detected_preset(history),
            forced=forced,
        )

    @contextmanager
    def told_on_failure(self, study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
        """Tell ``trial`` abandoned when the body raises while it is still running."""
        try:
            yield
        except BaseException as exc:
            try:
                running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
                if trial.number in running:
                    tell_abandoned(study, trial, f"{type(exc).__name__}: {exc}".strip(": "))
                    values, kind = trial.user_attrs.get(R.A_VALUES), trial.user_attrs.get(R.A_KIND, "")
                    if values and isinstance(exc, (NcclTuneError, KeyboardInterrupt)):
                        requeue(study, self.space, values, self.held.params, kind)
            except Exception:  # the storage itself failed: the trial stays running, and the next run settles it
                pass
            raise exc from None

    def ask(self, study: optuna.Study) -> optuna.Trial:
        """A new trial of ``study``, recorded as this tuner's (host, pid) before anything else is
        asked of it: a tuner killed while its sampler proposes (inside the first ``suggest``) leaves
        a running trial that the next run on this host settles (``recovery``)."""
        trial = study.ask()
        trial.set_user_attr(R.A_HOST, self.host)
        trial.set_user_attr(R.A_PID, os.getpid())
        return trial

    def run(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        values: Mapping[str, Any],
        kind: str,
        history: Sequence[TrialRecord],
        early_stop: bool = True,
        steps: int | None = None,
        forced: bool = False,
    ) -> TrialResult:
        """Launch ``trial`` with ``values`` once the node is clean, and tell the study the result;
        ``history`` is the study's records before it; ``steps``: its measured steps (``spec_for``);
        ``forced``: at the longest batch its config allows (``TrialKind.FORCED``)."""
        self.launcher.gate()
        spec, observer = self.begin(trial, values, kind, history, early_stop, steps=steps, forced=forced)
        result = self.launcher.run(spec, observer)
        return self.finish(study, trial, values, kind, history, spec, result, forced)

    def begin(
        self,
        trial: optuna.Trial,
        values: Mapping[str, Any],
        kind: str,
        history: Sequence[TrialRecord],
        early_stop: bool = True,
        steps: int | None = None,
        forced: bool = False,
    ) -> tuple[TrialSpec, TunerObserver]:
        """The spec and observer of ``trial``, recorded in it (the launch itself is the caller's)."""
        spec = self.spec_for(trial.number, values, history, steps=steps, forced=forced)
        if not forced:  # a forced trial runs two steps by design
            self.tell_measured_steps(spec, history)
        for key, value in (
            (R.A_TRIAL_DIR, str(spec.trial_dir)),
            (R.A_PLANNED_STEPS, spec.stop.total_steps),
            ("argv", list(spec.argv)),
            ("env", dict(spec.env)),
        ):
            trial.set_user_attr(key, value)
        observer = self.observer(trial.study, history, spec, early_stop, values)
        self.display.trial_started(trial.number, kind, values, trial.user_attrs.get(R.A_WHY))
        return spec, observer

    def observer(
        self,
        study: optuna.Study,
        history: Sequence[TrialRecord],
        spec: TrialSpec,
        early_stop: bool,
        values: Mapping[str, Any],
    ) -> TunerObserver:
        """The trial's observer: the early stop and screening against the incumbent
        (``screened_against``) as the study's throughput model estimates it (fitted as the planner
        fits it, the NCCL sweep's timings included); neither without an incumbent or with
        ``early_stop`` off (a re-run)."""
        incumbent = self.screened_against(history, values) if early_stop else None
        ratio = self.settings.early_stop_ratio if early_stop else 0.0
        screens = self.settings.screening and spec.stop.screen_steps > 0
        if incumbent is None or not (ratio or screens):
            return TunerObserver(self.display, self.interrupt, None, 0.0)
        model = ThroughputModel.of_study(self.space, self.held.params, history, load_sweep(study, self.space).speeds)
        bar = incumbent_bar(model, incumbent, max(spec.stop.screen_steps, 1))
        return TunerObserver(self.display, self.interrupt, bar, ratio, screens)

    def tell_measured_steps(self, spec: TrialSpec, history: Sequence[TrialRecord]) -> None:
        """Tell the user, once, when the measured steps per trial first differ from the space's, and
        why (``steps.py``); later trials follow the measured noise and their lines show their steps.
        Tell once, too, when the command's own length holds them below what the noise asks for."""
        first, steps = self.space.stop.measured_steps, spec.stop.measured_steps
        rule = next_measured_steps(first, history, spec.clocks.trial_timeout_s)
        if rule.command_capped and not self.told_command_cap:
            self.display.note(
                f"the steps scatter enough to ask for {rule.wanted_steps} measured steps a trial, but the command "
                f"ends by itself after {rule.command_cap_steps}: trials measure {steps}; give the command more steps "
                "with its own step flag for a finer reading (--steps N fixes the count)"
            )
            self.told_command_cap = self.told_measured_steps = True
        if self.told_measured_steps or steps == first:
            return
        noise = f": steps vary by {rule.measured_noise:.1%} so far" if rule.measured_noise is not None else ""
        self.display.note(
            f"from trial {spec.number} on, each trial measures {steps} steps instead of {first}{noise} "
            f"(at most {MAX_MEASURED_STEPS}; --steps N fixes the count)"
        )
        self.told_measured_steps = True

    def finish(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        values: Mapping[str, Any],
        kind: str,
        history: Sequence[TrialRecord],
        spec: TrialSpec,
        result: TrialResult,
        forced: bool = False,
    ) -> TrialResult:
        """Tell the study how ``trial`` ended (from the thread that owns the study); a memory report
        that gave no GPU size gets the one the study learned (``gpu_size``)."""
        result = sized_among(result, (r.result for r in history if r.result))
        worst = self.space.worst_tokens(values)
        tell_result(study, trial, result, self.space.min_headroom_frac, worst, forced)
        for line in self.launcher.notes():
            self.display.note(line)
        for _, reason in self.held.judge(study, spec, result):
            self.display.note(f"{reason}: dropped from the search")
        self.launched += 1
        again = result.verdict.from_outside and not any(
            r.values == values and r.result is not None and r.result.verdict.from_outside for r in history
        )
        if result.status is FailureClass.INTERRUPTED or again:
            requeue(study, self.space, values, self.held.params, kind)
        note = None if self.told_buffered else buffered_note(result)
        if note is not None:
            self.display.note(note)
            self.told_buffered = True
        if self.space.progress.detect and result.progress_preset and detected_preset(history) is None:
            self.display.note(f"progress: the output reads as preset {result.progress_preset} (trial {result.number})")
        records = R.records(study)
        told = next((r for r in records if r.number == trial.number), None)
        base = baseline(records)
        self.display.trial_finished(
            trial.number,
            result,
            result.status is FailureClass.OK and near_wall(result, self.space.min_headroom_frac),
            self.leader(records),
            study_advice(told, records, base.values if base else {}) if told is not None else None,
        )
        if again:
            self.display.note(
                f"trial {trial.number} failed for a cause none of its values can bring about "
                f"({result.status.value}: {result.verdict.cause.subtype}): its values run once more"
            )
        return result

    def leader(self, records: Sequence[TrialRecord], flaky: FlakyRule | None = None) -> Candidate | None:
        """The fastest stable config so far, confirmed or not: what the display calls the best
        (``flaky``: the study's ``flaky_rule`` when None)."""
        return select_winner(records, require_confirmation=False, flaky=flaky or flaky_rule(self.space, records))

    def screened_against(self, records: Sequence[TrialRecord], values: Mapping[str, Any]) -> Candidate | None:
        """What a trial of ``values`` is held against: the leader; but where the leader changes the
        training and ``values`` keep every semantic parameter at the user's value, the fastest stable
        config that keeps them too (None while there is none). Such a trial answers the report's
        speed-only line, a race of its own: a leader that drops the long prompts must not stop it."""
        flaky = flaky_rule(self.space, records)
        lead = self.leader(records, flaky)
        ref = study_reference(self.space, records)
        if lead is None or not keeps_semantics(values, ref) or not changes_semantics(lead, ref):
            return lead
        return speed_only(records, False, ref, flaky, study_user_env(self.space, records))
