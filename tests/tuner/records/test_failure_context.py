"""What a study adds to a failed run's advice: the values only failed runs held."""

from __future__ import annotations

import dataclasses

from nccl_tune.failure import Cause, FailureClass, Verdict
from nccl_tune.tuner.records.failure_context import held_only_by_failures, study_advice
from tests.tuner.search.test_predict_and_stability import BASE, MICRO, rec


def with_advice(r, advice: str, from_outside: bool = False):
    """``r`` with a verdict that gives ``advice`` (a GPU lost from the bus when ``from_outside``)."""
    cause = Cause("xid", "gpu_lost") if from_outside else None
    verdict = Verdict(r.status, advice=advice, cause=cause)
    return dataclasses.replace(r, result=dataclasses.replace(r.result, verdict=verdict))


def test_a_hang_leads_with_the_value_no_finished_run_held():
    ok = [rec(0, BASE), rec(1, {**BASE, MICRO: 4}), rec(2, {**BASE, MICRO: 4, "NCCL_ALGO": "Ring"})]
    hang = with_advice(rec(3, {**BASE, MICRO: 4, "NCCL_ALGO": "Tree"}, status=FailureClass.HANG), "raise it")
    records = [*ok, hang]
    assert held_only_by_failures(hang, records, BASE) == ["NCCL_ALGO=Tree"]
    assert (
        study_advice(hang, records, BASE) == "only runs that failed held NCCL_ALGO=Tree, the likeliest cause; raise it"
    )
    # nothing new: the verdict's advice alone; nothing finished: nothing to tell values apart
    again = with_advice(rec(4, {**BASE, MICRO: 4, "NCCL_ALGO": "Ring"}, status=FailureClass.HANG), "raise it")
    assert study_advice(again, [*records, again], BASE) == "raise it"
    assert study_advice(hang, [hang], BASE) == "raise it"


def test_memory_and_failures_from_outside_keep_their_own_advice():
    ok = [rec(0, BASE)]
    oom = with_advice(rec(1, {**BASE, MICRO: 16}, status=FailureClass.OOM), "lower micro")
    assert study_advice(oom, [*ok, oom], BASE) == "lower micro"
    lost = with_advice(rec(2, {**BASE, MICRO: 16}, status=FailureClass.CRASH), "a GPU fell off", from_outside=True)
    assert study_advice(lost, [*ok, lost], BASE) == "a GPU fell off"
    crash = with_advice(rec(3, {**BASE, MICRO: 16}, status=FailureClass.CRASH), "see the log")
    assert study_advice(crash, [*ok, crash], BASE).startswith(f"only runs that failed held {MICRO}=16")
