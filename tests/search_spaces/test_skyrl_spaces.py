"""The built-in SkyRL spaces against the keys each layout really has, and the layout read from a
command or its script."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.loader import load_space, parse_space
from nccl_tune.search_spaces.skyrl_layout import check_log_paths, command_layout, refusal_line, space_for_command
from nccl_tune.search_spaces.space import Target
from twin.dataclass_config import apply_dataclass_overrides
from twin.layout import Layout
from twin.overrides import apply_overrides
from twin.schema_today import SCHEMA, Sub

REPO = Path(__file__).resolve().parents[2]


def _keys(name: str) -> set[str]:
    space = load_space(name)
    text = space.text
    keys = {p.name for p in space.parameters if p.target is Target.OVERRIDE}
    keys |= set(space.trial_overrides) | set(space.context) | {d.key for d in space.derived}
    if "generator.inference_engine.gpu_memory_utilization" in text:
        keys.add("generator.inference_engine.gpu_memory_utilization")  # the optional parameter
    return keys


def _today_has(key: str) -> bool:
    cls = "SkyRLTrainConfig"
    *parents, last = key.split(".")
    for part in parents:
        field = dict(SCHEMA[cls]).get(part)
        if not isinstance(field, Sub):
            return False
        cls = field.cls
    return last in dict(SCHEMA[cls])


def test_todays_space_uses_only_keys_of_todays_dataclasses():
    keys = _keys("skyrl-text2sql")
    missing = sorted(k for k in keys if not _today_has(k))
    assert not missing
    assert "trainer.max_training_steps" in keys and "trainer.log_path" in keys and "trainer.export_path" in keys
    # and today's SkyRL accepts them all on one command line
    apply_dataclass_overrides([f"{k}=1" if "path" not in k else f"{k}=/x" for k in keys], {"HOME": "/h"})


def test_the_legacy_space_uses_only_keys_of_skyrl_trains_config():
    keys = _keys("skyrl-text2sql-legacy")
    apply_overrides([f"{k}=/x" if "path" in k else f"{k}=1" for k in keys], {"HOME": "/h"})
    assert "trainer.max_training_steps" not in keys


def test_todays_space_stops_the_trainer_and_keeps_the_trial_s_files_in_its_folder():
    space = load_space("skyrl-text2sql")
    o = space.trial_overrides
    assert o["trainer.max_training_steps"] == "{total_steps}"
    assert (o["trainer.eval_interval"], o["trainer.ckpt_interval"], o["trainer.hf_save_interval"]) == ("-1", "-1", "-1")
    assert o["trainer.resume_mode"] == "none" and o["trainer.dump_data_batch"] == "false"
    assert all(
        o[k].startswith("{trial_dir}/") for k in ("trainer.ckpt_path", "trainer.export_path", "trainer.log_path")
    )
    # the optional parameter is validated but not searched
    assert "generator.inference_engine.gpu_memory_utilization" not in space.names


def test_a_disabled_parameter_is_still_validated(tmp_path):
    text = load_space("skyrl-text2sql").text.replace("choices: [0.5, 0.6, 0.7, 0.8, 0.85]", "choices: []")
    with pytest.raises(NcclTuneError, match="gpu_memory_utilization"):
        parse_space(text, source="x", label="x.yaml")


@pytest.mark.parametrize(
    "command, layout",
    [
        (["bash", str(REPO / "examples" / "run_skyrl_sql_sim.sh")], "today"),
        (["bash", str(REPO / "examples" / "run_skyrl_sql_sim_legacy.sh")], "legacy"),
        (["uv", "run", "--isolated", "-m", "skyrl.train.entrypoints.main_base", "trainer.epochs=1"], "today"),
        (["python", "-m", "skyrl_train.entrypoints.main_base"], "legacy"),
        (["python", "train.py"], None),
    ],
)
def test_the_layout_is_read_from_the_command_or_its_script(command, layout, tmp_path):
    assert command_layout(command, tmp_path) == layout


def test_a_script_mentioning_the_other_layout_only_in_comments(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "# ported from skyrl_train.entrypoints.main_base\nuv run -m skyrl.train.entrypoints.main_base $@\n"
    )
    assert space_for_command(["bash", "run.sh"], tmp_path)[0] == "skyrl-text2sql"


def test_refusals_become_one_line_naming_the_key_or_the_other_space():
    hydra = "Could not override 'trainer.max_training_steps'."
    dataclass = "ValueError: Invalid fields {'num_inference_engines'} for GeneratorConfig. Valid fields are {'a'}."
    assert "use --space skyrl-text2sql-legacy" in refusal_line("skyrl-text2sql", [hydra])
    assert "use --space skyrl-text2sql" in refusal_line("skyrl-text2sql-legacy", [dataclass])
    assert refusal_line("skyrl-text2sql", [dataclass]).startswith(
        "Invalid fields {'num_inference_engines'} for GeneratorConfig"
    )
    assert refusal_line("skyrl-text2sql", ["CUDA out of memory"]) is None
    assert Layout.TODAY.value == "skyrl.train"


def test_log_path_checks_without_creating_anything(tmp_path):
    check_log_paths(["bash", "x.sh", f"trainer.log_path={tmp_path}/a/b/c"])
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NcclTuneError, match=r"trainer.log_path=.*file/logs: .*is not a folder"):
        check_log_paths([f"trainer.log_path={tmp_path}/ok", f"trainer.log_path={tmp_path}/file/logs"])
    check_log_paths(["no log path here"])
