"""A night's baseline: the previous good night of the series on the same hardware, or a tuned YAML of the same space."""

from __future__ import annotations

import pytest
import yaml

from nccl_tune.errors import NcclTuneError
from nccl_tune.nightly.baseline import baseline_from_file, previous_good_night
from nccl_tune.nightly.night import Night
from nccl_tune.nightly.regression import RunFact, compare_throughput, judge_night
from nccl_tune.search_spaces.loader import load_space
from tests.tuner.conftest import TINY_SPACE
from tests.tuner.nights import fingerprint


@pytest.fixture
def space():
    return load_space(str(TINY_SPACE))


def tuned(tmp_path, **changes):
    doc = {
        "overrides": {"trainer": {"micro": 4, "offload": False}},
        "env": {"NCCL_ALGO": "Ring"},
        "unset_env": [],
        "metrics": {"throughput_per_s": 400.0, "throughput_unit": "samples/s"},
        "study": {"name": "t", "space": "tiny"},
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            doc[section][field] = value
        else:
            doc[section] = value
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_tuned_yaml_gives_the_values_and_runs(tmp_path, space):
    b = baseline_from_file(tuned(tmp_path), space)
    assert dict(b.values) == {"trainer.micro": 4, "trainer.offload": False, "NCCL_ALGO": "Ring"}
    assert b.runs_per_s == (400.0,) and b.source == "file" and b.space == "tiny"
    unset = baseline_from_file(tuned(tmp_path, env={}, unset_env=["NCCL_ALGO"]), space)
    assert unset.values["NCCL_ALGO"] == "unset"
    exact = baseline_from_file(
        tuned(
            tmp_path,
            study__params={"trainer.micro": 2, "trainer.offload": True, "NCCL_ALGO": "Tree"},
            metrics__runs_per_s=[390, 400, 410],
        ),
        space,
    )
    assert exact.values["trainer.micro"] == 2 and exact.throughput_per_s == 400


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"study__space": "skyrl-text2sql"}, "tuned for space 'skyrl-text2sql', but this run uses space 'tiny'"),
        ({"overrides": {"trainer": {"micro": 3, "offload": False}}}, "'3' is not a value of trainer.micro"),
        ({"overrides": {"generator": {"n": 1}}}, "has no value for parameter trainer.micro of space tiny"),
        ({"metrics": {}}, "no measured throughput"),
        ({"study": "x"}, "not a tuned YAML"),
    ],
)
def test_a_baseline_file_of_another_space_is_refused_in_one_line(tmp_path, space, changes, fragment):
    path = tuned(tmp_path, **changes)
    with pytest.raises(NcclTuneError) as exc:
        baseline_from_file(path, space)
    assert fragment in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_unreadable_baseline_files(tmp_path, space):
    with pytest.raises(NcclTuneError, match="does not exist"):
        baseline_from_file(tmp_path / "missing.yaml", space)
    bad = tmp_path / "bad.yaml"
    bad.write_text("overrides: [\n")
    with pytest.raises(NcclTuneError, match="line 2 YAML syntax error"):
        baseline_from_file(bad, space)


def _night(i, best, fp=None, verdict=None, finished=True):
    runs = () if best is None else (best, best)
    return Night(f"n{i}", "s", f"2026-08-0{i}", fp or fingerprint(), runs, {"x": i}, 0, None, verdict, finished)


def test_the_previous_good_night_skips_regressions_other_hardware_and_unfinished_nights():
    slow = compare_throughput([100.0, 100.0, 100.0], [80.0, 80.0, 80.0], 5)
    fails = judge_night([100.0], [RunFact(0, "oom")], [], 5)
    nights = [
        _night(1, 100.0),
        _night(2, 100.0, fp=fingerprint(gpu_count=4)),
        _night(3, 80.0, verdict=slow),
        _night(4, None),
        _night(5, 90.0, verdict=fails),
        _night(6, 100.0, finished=False),
    ]
    assert previous_good_night(nights, "8x NVIDIA H100 80GB HBM3").study == "n1"
    assert previous_good_night(nights, "4x NVIDIA H100 80GB HBM3").study == "n2"
    assert previous_good_night(nights, None).study == "n2"
    assert previous_good_night([], None) is None
