"""The NCCL sweep's record: what its checks measured, read back as the search uses it."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.tuner.records.nccl_sweep import A_SWEEP, BASELINE_KEY, SweepEntry, key_of, load, log_speedup, planned

SPACE = parse_space(
    """
name: sweep
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, LL], default: unset, memory: none}
  - {name: NCCL_CUMEM_ENABLE, kind: categorical, choices: [unset, 0], default: unset, memory: small}
throughput: {samples_per_step: 8}
""",
    source="test",
    label="test",
)
BASE = {"NCCL_ALGO": "unset", "NCCL_PROTO": "unset", "NCCL_CUMEM_ENABLE": "unset"}


def rounds(ms: float, spread: float = 0.01) -> tuple[float, ...]:
    return tuple(ms / 1e3 * (1 + spread * d) for d in (-2, -1, 0, 1, 2))


def stored(tmp_path: Path, entries: dict[str, SweepEntry]) -> optuna.Study:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    study.set_user_attr(A_SWEEP, {k: e.to_json() for k, e in entries.items()})
    return optuna.load_study(storage=f"sqlite:///{tmp_path}/s.db", study_name="s")


def test_the_sweep_changes_one_nccl_variable_at_a_time_and_leaves_held_ones_alone():
    assert planned(SPACE, {}) == [
        ("NCCL_ALGO", "Ring"),
        ("NCCL_ALGO", "NVLS"),
        ("NCCL_PROTO", "LL"),
        ("NCCL_CUMEM_ENABLE", 0),
    ]
    assert planned(SPACE, {"NCCL_ALGO": "Ring"}) == [("NCCL_PROTO", "LL"), ("NCCL_CUMEM_ENABLE", 0)]


def test_variables_of_the_network_transport_are_not_swept():
    space = parse_space(
        """
name: net
parameters:
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, LL128], default: unset, memory: none}
  - {name: NCCL_SOCKET_NTHREADS, kind: categorical, choices: [unset, 4, 8], default: unset, memory: none}
throughput: {samples_per_step: 8}
""",
        source="test",
        label="net",
    )
    assert planned(space, {}) == [("NCCL_PROTO", "LL128")]


def test_two_checks_within_their_noise_time_alike_and_a_clear_difference_is_its_log_ratio():
    assert log_speedup(rounds(500), rounds(510)) == 0.0, "2% apart, within the checks' run-to-run noise"
    assert log_speedup(rounds(500), rounds(400)) == pytest.approx(math.log(500 / 400))
    assert log_speedup(rounds(500), rounds(1000)) == pytest.approx(-math.log(2))
    noisy = rounds(400, spread=0.25)
    assert log_speedup(rounds(500, spread=0.25), noisy) == 0.0, "rounds that scatter by 25% tell 20% apart from nothing"


def test_what_the_checks_measured_reads_back_as_speeds_failures_and_the_gpu_time_they_took(tmp_path):
    ok = "ok"
    study = stored(
        tmp_path,
        {
            BASELINE_KEY: SweepEntry(ok, rounds(500), 30.0, 240.0, BASE),
            key_of("NCCL_ALGO", "NVLS"): SweepEntry(ok, rounds(380), 30.0, 240.0, {**BASE, "NCCL_ALGO": "NVLS"}),
            key_of("NCCL_ALGO", "Ring"): SweepEntry(ok, rounds(505), 30.0, 240.0, {**BASE, "NCCL_ALGO": "Ring"}),
            key_of("NCCL_CUMEM_ENABLE", 0): SweepEntry("hang", (), 60.0, 480.0, {**BASE, "NCCL_CUMEM_ENABLE": 0}),
        },
    )
    sweep = load(study, SPACE)
    assert sweep.speeds["NCCL_ALGO"] == {"NVLS": pytest.approx(math.log(500 / 380)), "Ring": 0.0}
    assert "NCCL_PROTO" not in sweep.speeds, "not checked yet: no speed"
    assert sweep.failed == {("NCCL_CUMEM_ENABLE", 0): "hang"}
    assert sweep.gpu_s == 1200.0
    reason = sweep.refused({"train.micro_batch_size": 8, **BASE, "NCCL_CUMEM_ENABLE": 0})
    assert reason is not None and "NCCL_CUMEM_ENABLE=0" in reason and "hang" in reason
    assert sweep.refused({**BASE, "NCCL_CUMEM_ENABLE": 0, "NCCL_ALGO": "Ring"}) is None, "another set of NCCL values"
    assert sweep.refused({**BASE, "NCCL_ALGO": "NVLS"}) is None


def test_without_the_baseline_s_check_nothing_is_compared(tmp_path):
    study = stored(
        tmp_path,
        {
            BASELINE_KEY: SweepEntry("hang", (), 60.0, None, BASE),
            key_of("NCCL_ALGO", "NVLS"): SweepEntry("ok", rounds(380), 30.0, None, {**BASE, "NCCL_ALGO": "NVLS"}),
        },
    )
    sweep = load(study, SPACE)
    assert not sweep.speeds and not sweep.failed and sweep.refused({**BASE, "NCCL_ALGO": "NVLS"}) is None
