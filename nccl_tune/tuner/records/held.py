"""The parameters a study holds at one value, owned by one object for the whole run: those given
with ``--set`` (``pins``) and those dropped during the study because their value never reached the
program they tune (``dropped``). Every part of a run reads them here when it needs them (the sampler,
admission, the stop rules, recovery, each trial and re-run, the NCCL sweep), so a parameter dropped
by a trial, or by an earlier run of a resumed study, is held everywhere from then on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult, TrialSpec
from nccl_tune.tuner.records import dropped
from nccl_tune.tuner.records.pins import Pins


class HeldParameters:
    """The held parameters of one run; ``params`` and ``context`` are read at the time of use."""

    def __init__(self, space: SearchSpace, pins: Pins) -> None:
        self.space = space
        self.pins = pins
        """What ``--set`` holds (checked against the space)."""
        self._dropped: dict[str, str] = {}

    @classmethod
    def of_values(cls, space: SearchSpace, params: Mapping[str, Any] | None = None) -> HeldParameters:
        """Parameters held at ``params`` and nothing dropped (no ``--set`` of context values)."""
        return cls(space, Pins(params=dict(params or {}), context={}))

    @property
    def params(self) -> dict[str, Any]:
        """Every held parameter and its value: ``--set``'s, and each dropped one at its held value."""
        known = set(self.space.names)
        held = {n: dropped.held_value(self.space, n) for n in self._dropped if n in known}
        return {**self.pins.params, **held}

    @property
    def context(self) -> Mapping[str, Any]:
        """Context values ``--set`` changed from the space's."""
        return self.pins.context

    @property
    def dropped(self) -> Mapping[str, str]:
        """Parameters dropped so far, with the reason."""
        return dict(self._dropped)

    def read(self, study: optuna.Study) -> None:
        """Hold the parameters ``study`` dropped before (a resumed study)."""
        self._dropped.update(dropped.load(study))

    def judge(self, study: optuna.Study, spec: TrialSpec, result: TrialResult) -> list[tuple[str, str]]:
        """Drop the parameters this trial shows never reach the program (recorded in ``study``) and
        hold them from now on; (name, reason) of each."""
        new = dropped.check(study, self.space, spec, result)
        self._dropped.update(new)
        return new
