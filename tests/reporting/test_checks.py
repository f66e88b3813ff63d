"""The checks a night's report ends with, on a real study with its records amended."""

from __future__ import annotations

import dataclasses

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.nightly.night import Baseline
from nccl_tune.reporting.checks import FAILED, PASSED, baseline_still_runs
from nccl_tune.reporting.view import load_view
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.study.night import baseline_runs
from tests.tuner.search.test_predict_and_stability import BASE, MICRO, rec


@pytest.fixture(scope="module")
def view(tiny_study):
    return load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", "t")


def _night_of(view, baseline_values, records):
    night = dataclasses.replace(
        view.night, baseline=Baseline("series", "s.4", dict(baseline_values), (400.0,), "skyrl-text2sql")
    )
    return dataclasses.replace(view, night=night, records=tuple(records))


def test_an_interrupted_run_of_the_baseline_does_not_fail_it(view):
    """The baseline ran once, then the night was stopped (Ctrl-C) during its re-run: the re-run says
    nothing of the config, which still runs."""
    base = {**BASE, MICRO: 4}
    runs = [rec(0, base, kind=TrialKind.BASELINE), rec(1, base, status=FailureClass.INTERRUPTED, kind=TrialKind.RERUN)]
    check = baseline_still_runs(_night_of(view, base, runs))
    assert check.outcome == PASSED and check.message.startswith("1 runs ok"), check
    failed = [*runs, rec(2, base, status=FailureClass.HANG, kind=TrialKind.RERUN)]
    check = baseline_still_runs(_night_of(view, base, failed))
    assert check.outcome == FAILED and check.message.startswith("trial 2: hang"), check


def test_the_baseline_run_as_nccl_clamps_it_is_the_baseline():
    """A baseline of 16 socket threads x 8 sockets runs as 16 x 4 (NCCL's limit of 64 sockets): a
    night that ran the clamped spelling ran the baseline."""
    given = {**BASE, MICRO: 8, "NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": 8}
    records = [
        rec(0, BASE),
        rec(1, {**given, "NCCL_NSOCKS_PERTHREAD": 4}),
        rec(2, {**given, "NCCL_NSOCKS_PERTHREAD": 2}),
    ]
    found = baseline_runs(Baseline("file", "tuned.yaml", given, (400.0,), "skyrl-text2sql"), records)
    assert [r.number for r in found] == [1]
