"""What stopping trials early saved: the trials the tuner stopped as slower than the incumbent
(cheap screening after ``stop.screen_steps``, or the early stop), the time they ran, and the time
they did not run (``TrialRecord.unspent_s``), against what the launched trials would have taken."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nccl_tune.tuner.records.study_records import Outcome, TrialRecord


@dataclass(frozen=True)
class EarlyStops:
    trials: tuple[int, ...]
    """The trials stopped early, by number."""
    spent_s: float
    """Wall time those trials ran."""
    saved_s: float
    """Wall time they did not run: their planned steps not reached, at each one's mean step time."""
    launched_s: float
    """Wall time of every launched trial (those stopped early included)."""
    unknown: int
    """Trials stopped early whose planned steps the study did not record (not in ``saved_s``)."""

    @property
    def saved_share(self) -> float:
        """``saved_s`` over what the launched trials would have taken had none been stopped."""
        total = self.launched_s + self.saved_s
        return self.saved_s / total if total else 0.0


def early_stops(records: Iterable[TrialRecord]) -> EarlyStops | None:
    """The study's ``EarlyStops``; None when no trial was stopped early."""
    launched = [r for r in records if r.outcome is Outcome.LAUNCHED and r.result is not None]
    stopped = [r for r in launched if r.stopped_early]
    if not stopped:
        return None
    unspent = [r.unspent_s for r in stopped]
    return EarlyStops(
        trials=tuple(r.number for r in stopped),
        spent_s=sum(r.result.wall_s for r in stopped),
        saved_s=sum(s for s in unspent if s is not None),
        launched_s=sum(r.result.wall_s for r in launched),
        unknown=sum(s is None for s in unspent),
    )
