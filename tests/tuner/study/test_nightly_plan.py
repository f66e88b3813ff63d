"""A nightly run's plan: its baseline from the series or a file, and one-line refusals before any trial."""

from __future__ import annotations

import optuna
import pytest
import yaml

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.records.series import night_study_name
from nccl_tune.tuner.study.night import plan_night
from tests.tuner.conftest import TINY_SPACE
from tests.tuner.nights import fingerprint, store_nights

VALUES = {"trainer.micro": 4, "trainer.offload": False, "NCCL_ALGO": "unset"}


@pytest.fixture
def storage(tmp_path):
    return optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/db.sqlite")


def plan(storage, **kw):
    args = dict(series=None, baseline_file=None, warm_start=False, fail_on_regression_pct=None)
    return plan_night(storage, load_space(str(TINY_SPACE)), fingerprint(), **{**args, **kw})


def test_the_baseline_is_the_series_previous_good_night(storage, tmp_path):
    nights = store_nights(f"sqlite:///{tmp_path}/db.sqlite", "s", [100.0, 101.0])
    # store_nights' values are not the tiny space's: give the last night real ones
    study = optuna.load_study(study_name="s.1", storage=storage)
    study.set_user_attr("night", {**nights[1].to_json(), "best_values": VALUES})
    p = plan(storage, series="s", warm_start=True, fail_on_regression_pct=5)
    assert p.baseline.origin == "s.1" and dict(p.baseline.values) == VALUES and p.threshold_pct == 5
    assert p.baseline.runs_per_s == pytest.approx((99.99, 101.0, 102.01))
    assert plan(storage, series="new").baseline is None  # a first night: nothing to compare with, and fine


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"series": "a b"}, "--series 'a b': not a plain name"),
        ({"series": "s", "fail_on_regression_pct": 5}, "--fail-on-regression: series 's' has no earlier night"),
        ({"series": "s", "warm_start": True}, "--warm-start: series 's' has no earlier night"),
        ({"fail_on_regression_pct": 5}, "--fail-on-regression 5: no baseline to compare with"),
        ({"warm_start": True}, "--warm-start: nothing to start from"),
        ({"series": "s", "fail_on_regression_pct": 0}, "--fail-on-regression 0: give a percentage"),
    ],
)
def test_bad_nightly_options_are_one_line(storage, kw, fragment):
    with pytest.raises(NcclTuneError) as exc:
        plan(storage, **kw)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_baseline_file_of_another_space_is_refused(storage, tmp_path):
    f = tmp_path / "tuned.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "overrides": {"trainer": {"micro": 4}},
                "study": {"space": "skyrl-text2sql"},
                "metrics": {"throughput_per_s": 1.0},
            }
        )
    )
    with pytest.raises(NcclTuneError, match="tuned for space 'skyrl-text2sql', but this run uses space 'tiny'"):
        plan(storage, baseline_file=f, fail_on_regression_pct=5)


def test_night_study_names_sort_by_time():
    import datetime as dt

    t = dt.datetime(2026, 8, 6, 2, 0, 5, tzinfo=dt.timezone.utc)
    assert night_study_name("sql", t) == "sql.20260806-020005"
