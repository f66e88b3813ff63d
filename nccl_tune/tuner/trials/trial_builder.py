"""Turn a parameter assignment into a ``TrialSpec``: argv, env overlay, clocks, stop rule.

argv is the user's command, then the space's fixed trial overrides, then pinned context
values, then the trial's own arguments (Hydra and argparse keep the last value of a key, so the
trial's values win over the script's), then, for a forced trial, the space's ``force_worst_case``. ``search_spaces/render.py`` spells them; values are argv
elements, never spliced into a shell string. The env overlay is ``TRIAL_ENV_DEFAULTS``, the
run's extra env, the space's ``trial.env``, then the trial's own variables.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nccl_tune.presets import apply_preset
from nccl_tune.search_spaces.render import fixed_argv, forced_values, render_values
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.trial import Clocks, MemoryKnob, StopRule, TrialSpec
from nccl_tune.tuner.records.dropped import probe_overlay
from nccl_tune.tuner.records.storage import marker_scope, study_folder
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.steps import next_measured_steps

TRIAL_ENV_DEFAULTS = {"PYTHONUNBUFFERED": "1"}
"""Set in every trial's environment unless the space's ``trial.env`` sets it (``PYTHONUNBUFFERED: ""``
keeps a Python trainer's stdout buffered): a Python trainer writing to a pipe otherwise block-buffers
its stdout and its step lines all arrive at exit, where the wall clock cannot time them."""


def expand(template: str, *, trial_dir: Path, study: str, number: int, total_steps: int | None = None) -> str:
    """Replace ``{trial_dir}``, ``{study}``, ``{trial}`` and ``{total_steps}`` (warm-up plus measured
    steps: a trainer's own step cap) and nothing else in ``template``."""
    out = template.replace("{trial_dir}", str(trial_dir)).replace("{study}", study).replace("{trial}", str(number))
    return out if total_steps is None else out.replace("{total_steps}", str(total_steps))


def trial_dir_for(results_dir: Path, study: str, number: int) -> Path:
    return (study_folder(results_dir, study) / f"trial-{number:04d}").resolve()


def clocks_for(
    space: SearchSpace, settings: RunSettings, measured: Sequence[Mapping[str, float]] = (), steps_run: int = 0
) -> Clocks:
    """The space's clocks with the command line's clock options, knowing the phase maxima the
    study's earlier trials ``measured`` (``Clocks.learned``) and the most steps one of them ran."""
    c = space.clocks.learned(*measured)
    return dataclasses.replace(
        c,
        silence_steps=steps_run,
        stall_timeout_s=_given(settings.stall_timeout_s, c.stall_timeout_s),
        startup_timeout_s=_given(settings.startup_timeout_s, c.startup_timeout_s),
        trial_timeout_s=_given(settings.trial_timeout_s, c.trial_timeout_s),
        grace_s=_given(settings.grace_s, c.grace_s),
    )


def _given(option: float | None, default: float) -> float:
    return default if option is None else option


def stop_for(
    space: SearchSpace, settings: RunSettings, history: Sequence[TrialRecord] = (), trial_timeout_s: float | None = None
) -> StopRule:
    """The space's stop rule with ``--steps``/``--warmup-steps``; without ``--steps``, the measured
    steps the study's ``history`` calls for (``steps.next_measured_steps``), of which a command that
    ends by itself must have done the space's (``StopRule.enough_steps``). Screening keeps at least
    one measured step after its screened ones (none when ``--steps 1``)."""
    if settings.steps is None:
        measured = next_measured_steps(space.stop.measured_steps, history, trial_timeout_s).steps
    else:
        measured = settings.steps
    return StopRule(
        warmup_steps=space.stop.warmup_steps if settings.warmup_steps is None else settings.warmup_steps,
        measured_steps=measured,
        screen_steps=min(space.stop.screen_steps, measured - 1),
        enough_steps=min(measured, space.stop.measured_steps),
    )


FORCED_STOP = StopRule(warmup_steps=1, measured_steps=1, screen_steps=0, enough_steps=1)
"""A forced trial's steps: every one is at the longest batch, so two give the worst case (its speed is not read)."""
FORCED_SCALE_MIN = 4.0
"""How much longer a forced trial's phases may take at least: a step's longest response understates
how much more every sample generates when all run to the cap."""
FORCED_SCALE_MAX = 20.0


def forced_scale(space: SearchSpace, values: Mapping[str, Any], history: Sequence[TrialRecord]) -> float:
    """How much longer a phase of a trial forced to its longest batch may take than the study measured:
    the longest batch's tokens over the most a normal run of ``values`` carried (generation and
    training grow with them), from ``FORCED_SCALE_MIN`` to ``FORCED_SCALE_MAX``."""
    worst = space.worst_tokens(values)
    seen = [
        t
        for r in history
        if r.result is not None and not r.forced and dict(r.values) == dict(values)
        for t in r.result.step_tokens
        if t
    ]
    if not worst or not seen:
        return FORCED_SCALE_MIN
    return min(max(worst / max(seen), FORCED_SCALE_MIN), FORCED_SCALE_MAX)


def memory_knobs(space: SearchSpace, values: Mapping[str, Any]) -> tuple[MemoryKnob, ...]:
    """The space's parameters that move device memory, then those that move host RAM, with their
    values in ``values`` (for advice)."""
    knobs = []
    for host in (False, True):
        for p in space.parameters:
            effect = p.host_memory if host else p.memory
            if effect.signed and p.name in values:
                rank = p.memory_rank(values[p.name], effect)
                room = any(p.memory_rank(c, effect) < rank for c in p.choices)
                knobs.append(MemoryKnob(p.name, format_value(values[p.name]), effect.value, p.arg, room, host))
    return tuple(knobs)


def build_trial_spec(
    space: SearchSpace,
    settings: RunSettings,
    *,
    study: str,
    number: int,
    values: Mapping[str, Any],
    context_pins: Mapping[str, Any],
    history: Sequence[TrialRecord] = (),
    detected_preset: str | None = None,
    forced: bool = False,
) -> TrialSpec:
    """The full ``TrialSpec`` for trial ``number`` with parameter ``values``; ``history``: the
    study's records before it (their phase maxima set the clocks, their step times the measured
    steps); ``detected_preset`` is the progress preset an earlier trial's output was recognised
    as, when the space names none; ``forced``: the space's ``stability.force_worst_case`` settings
    come last, to run the longest batch the config allows."""
    trial_dir = trial_dir_for(settings.results, study, number)
    earlier = [r.result for r in history if r.result and not r.forced]
    measured = [res.phase_max_s for res in earlier]
    if forced:
        scale = forced_scale(space, values, history)
        measured = [{k: v * scale for k, v in m.items()} for m in measured]
    clocks = clocks_for(space, settings, measured, max((len(res.step_times_s) for res in earlier), default=0))
    stop = FORCED_STOP if forced else stop_for(space, settings, history, clocks.trial_timeout_s)
    if forced:
        clocks = dataclasses.replace(clocks, trial_timeout_s=clocks.trial_timeout_s * scale)

    def x(text: str) -> str:
        return expand(text, trial_dir=trial_dir, study=study, number=number, total_steps=stop.total_steps)

    args, param_env = render_values(space, values)
    forced_args, forced_env = forced_values(space, values) if forced else ([], {})
    overrides = {k: None if v is None else x(v) for k, v in space.trial_overrides.items()}
    argv = [*settings.command, *fixed_argv(space, overrides, context_pins), *args, *forced_args]
    env: dict[str, str | None] = {**TRIAL_ENV_DEFAULTS, **settings.extra_env}
    env.update({k: x(v) for k, v in space.trial_env.items()})
    env.update(param_env)
    env.update(forced_env)
    env.update(probe_overlay(space, {**os.environ, **env}))  # NCCL reports the variables it read
    return TrialSpec(
        study=study,
        number=number,
        params=dict(values),
        argv=tuple(argv),
        env=env,
        trial_dir=trial_dir,
        clocks=clocks,
        stop=stop,
        progress=apply_preset(space.progress, detected_preset if space.progress.detect else None),
        samples_per_step=space.samples(values),
        cwd=Path.cwd(),
        memory_knobs=memory_knobs(space, values),
        scope=marker_scope(study, settings.storage_url),
    )
