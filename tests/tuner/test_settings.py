"""RunSettings checks its own values once, when it is made: one line naming the option."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.tuner.settings import SAMPLERS, RunSettings, default_storage_url
from tests.tuner.conftest import one_line_error, run_cli


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"command": ()}, "no command after --"),
        ({"trials": 0}, "--trials 0: must be at least 1"),
        ({"sampler": "cmaes"}, "--sampler 'cmaes' is unknown; use local, tpe or random"),
        ({"confirm": -1}, "--confirm -1: must be 0 or more"),
        ({"launcher": "slurm"}, "--launcher 'slurm' is unknown"),
        ({"ray_address": "127.0.0.1:6379"}, "--ray-address is for --launcher ray"),
        ({"parallel": 2}, "--parallel 2 needs --launcher ray"),
    ],
)
def test_bad_values_are_refused_when_the_settings_are_made(kwargs, fragment):
    with pytest.raises(NcclTuneError) as info:
        RunSettings(**{"command": ("true",), **kwargs})
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_every_sampler_name_is_accepted_and_storage_defaults_to_the_results_folder(tmp_path):
    for name in SAMPLERS:
        assert RunSettings(command=("true",), sampler=name).sampler == name
    settings = RunSettings(command=("true",), results=tmp_path / "r")
    assert settings.storage_url == default_storage_url(tmp_path / "r") == f"sqlite:///{tmp_path}/r/nccl-tune.db"
    assert RunSettings(command=("true",), storage="sqlite:///x.db").storage_url == "sqlite:///x.db"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../../x", "holds '/'"),
        ("/tmp/elsewhere", "holds '/'"),
        ("runs\\x", "holds '\\\\'"),
        ("..", "is not a folder name"),
        (" x", "has spaces around it"),
    ],
)
def test_a_study_name_that_walks_out_of_results_is_refused(tmp_path, name, why):
    proc = run_cli(
        ["run", "--study", name, "--results", "r", "--trials", "1", "--", sys.executable, "-c", "pass"], cwd=tmp_path
    )
    one_line_error(proc, f"--study {name!r}: a study name is a name, not a path ({why})")
    assert not (tmp_path / "r").exists() and not Path("/tmp/elsewhere").exists()
