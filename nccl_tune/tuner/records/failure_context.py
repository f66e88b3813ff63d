"""What a study adds to a failed run's advice: the values it held that no run that finished held.

A trial's verdict is read from its own output alone. A hang before the first step then reads as a
slow start-up or a progress rule that matched nothing ("raise --startup-timeout"), even where other
runs of the same command made progress and this one alone forced ``NCCL_PROTO=LL128``: next to
them, what this run alone set is the likeliest cause. Failures whose advice already names what to
change (memory, a refused key), an interrupted run and a failure from outside the job (a
scheduler's signal, a lost GPU) keep their verdict's advice as it is. The live run line and every
report format say the same (``study_advice``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord

NOT_A_SETTING = frozenset(
    {FailureClass.OK, FailureClass.OOM, FailureClass.HOST_OOM, FailureClass.CONFIG_ERROR, FailureClass.INTERRUPTED}
)
"""Failures whose advice already names what to change, or that no setting brought about."""


def held_only_by_failures(r: TrialRecord, records: Iterable[TrialRecord], baseline: Mapping[str, Any]) -> list[str]:
    """``name=value`` of each of ``r``'s values away from ``baseline`` that no launched run of
    ``records`` that finished held; empty when none finished (nothing to tell the values apart)."""
    finished = [o.values for o in records if o.outcome is Outcome.LAUNCHED and o.ok and o.values]
    if not finished:
        return []
    return [
        f"{n}={format_value(v)}"
        for n, v in r.values.items()
        if v != baseline.get(n) and not any(f.get(n) == v for f in finished)
    ]


def study_advice(r: TrialRecord, records: Iterable[TrialRecord], baseline: Mapping[str, Any]) -> str:
    """``r``'s verdict advice, led by the values only failed runs of ``records`` held (module
    docstring); the advice alone where the failure is not a setting's or none is new."""
    res = r.result
    advice = res.verdict.advice if res is not None else ""
    if res is None or r.ok or r.status in NOT_A_SETTING or res.verdict.from_outside or not r.values:
        return advice
    alone = held_only_by_failures(r, records, baseline)
    if not alone:
        return advice
    lead = f"only runs that failed held {', '.join(alone)}, the likeliest cause"
    return f"{lead}; {advice}" if advice else lead
