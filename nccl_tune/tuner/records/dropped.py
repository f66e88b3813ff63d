"""Parameters dropped from a study because their value never reaches the program they tune.

A trial's result carries what each rank's NCCL reported reading from its environment
(``TrialResult.nccl_env_seen``). The first trial that sets an NCCL parameter tells whether that
value reached NCCL (``diagnose.nccl_seen.unreached``); one that did not (the trainer sets its own
value for its workers; the workers do not inherit the trial's environment) is dropped: recorded in
the study with a one-line reason, held at ``unset`` (or its default) for every later trial
(``held.HeldParameters``), and never exported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from nccl_tune.diagnose.nccl_seen import probe_env, unreached
from nccl_tune.search_spaces.space import UNSET, SearchSpace, Target
from nccl_tune.trial import TrialResult, TrialSpec

ATTR = "dropped_params"
"""Study user attribute: parameter name -> the reason it was dropped."""


def nccl_params(space: SearchSpace) -> list[str]:
    """The space's NCCL environment parameters (those whose effect NCCL reports)."""
    return [p.name for p in space.parameters if p.target is Target.ENV and p.name.startswith("NCCL_")]


def probe_overlay(space: SearchSpace, env: Mapping[str, str | None]) -> dict[str, str]:
    """What a trial's environment needs so that NCCL reports the variables it read (nothing when
    the space tunes no NCCL variable)."""
    return probe_env(env) if nccl_params(space) else {}


def load(study: optuna.Study) -> dict[str, str]:
    return dict(study.user_attrs.get(ATTR) or {})


def check(study: optuna.Study, space: SearchSpace, spec: TrialSpec, result: TrialResult) -> list[tuple[str, str]]:
    """The parameters this trial shows to be ineffective, not dropped before: recorded in the study;
    returns (name, reason) of each. Only parameters the trial set are judged."""
    known = load(study)
    names = [n for n in nccl_params(space) if n not in known and spec.env.get(n) is not None]
    new = [(u.name, u.reason) for u in unreached(names, spec.env, result.nccl_env_seen)]
    if new:
        study.set_user_attr(ATTR, {**known, **dict(new)})
    return new


def held_value(space: SearchSpace, name: str) -> Any:
    """The value a dropped parameter is held at: ``unset`` when it has that choice, else its default."""
    p = next(p for p in space.parameters if p.name == name)
    if UNSET in p.choices:
        return UNSET
    return p.default if p.default is not None else p.choices[0]
