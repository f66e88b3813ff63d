"""`nccl-tune run` on the twin in both SkyRL layouts: the space is picked from the module the
script runs, the trainer stops itself, its infra log lands in the trial folder, a refusal by the
other layout names the other space, and a variable the trainer overrides is dropped with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nccl_tune.search_spaces.loader import load_space
from tests.tuner.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
TODAY = REPO / "examples" / "run_skyrl_sql_sim.sh"
LEGACY = REPO / "examples" / "run_skyrl_sql_sim_legacy.sh"
ENV = {"SIM_SEED": "3", "SIM_RANKS": "2", "SIM_TIME_SCALE": "0.004"}
ONE = ["--trials", "1", "--confirm", "0", "--steps", "1"]

pytestmark = pytest.mark.slow


def _trial(results: Path) -> Path:
    (folder,) = results.glob("*/trial-0000")
    return folder


def test_todays_layout_stops_itself_and_nccl_cumem_enable_is_dropped_with_its_reason(workdir: Path) -> None:
    r = run_cli(
        [
            "run",
            "--no-force-worst-case",
            *ONE,
            "--results",
            "res",
            "--set",
            "NCCL_CUMEM_ENABLE=1",
            "--set",
            "NCCL_PROTO=LL128",
            "--output",
            "tuned.yaml",
            "--",
            "bash",
            str(TODAY),
        ],
        workdir,
        ENV,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = r.stdout + r.stderr
    assert "space skyrl-text2sql: the command runs today's SkyRL (skyrl.train)" in said
    folder = _trial(workdir / "res")
    out = (folder / "output.log").read_text()
    (infra,) = (folder / "logs").glob("infra-*.log")
    assert f"Infrastructure logs will be written to: {infra}" in out
    assert "Reached max_training_steps=2, stopping early." in out
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "ok" and str(infra) in result["log_paths"]
    assert result["memory"]["source"] == "log" and len(result["memory"]["gpus"]) == 8  # from the infra log
    # Each step's tokens (generate/max_num_tokens, after the step) and peak (the infra log's step lines)
    assert len(result["step_tokens"]) == 2 and all(t > 0 for t in result["step_tokens"])
    assert len(result["memory"]["step_peak_frac"]) == 2 and all(0 < f < 1 for f in result["memory"]["step_peak_frac"])
    # every rank's NCCL reported its environment: the trial's NCCL_PROTO, SkyRL's NCCL_CUMEM_ENABLE=0
    seen = result["nccl_env_seen"]
    assert len(seen) == 8 and all(v["NCCL_CUMEM_ENABLE"] == "0" and v["NCCL_PROTO"] == "LL128" for v in seen.values())
    reason = "NCCL_CUMEM_ENABLE: the trainer sets it to 0 on its workers (weight sync over NCCL)"
    assert f"{reason}: dropped from the search" in said
    tuned = yaml.safe_load((workdir / "tuned.yaml").read_text())
    assert tuned["dropped"] == {"NCCL_CUMEM_ENABLE": reason}
    assert "NCCL_CUMEM_ENABLE" not in tuned["env"] and "NCCL_CUMEM_ENABLE" not in tuned["unset_env"]
    assert tuned["env"]["NCCL_PROTO"] == "LL128"  # a value NCCL did read stays
    report = run_cli(["report", "--results", "res"], workdir)
    assert f"dropped from the search: {reason}" in " ".join((report.stdout + report.stderr).split())


def test_the_legacy_layout_is_picked_from_its_script(workdir: Path) -> None:
    r = run_cli(["run", "--no-force-worst-case", *ONE, "--results", "res", "--", "bash", str(LEGACY)], workdir, ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "space skyrl-text2sql-legacy: the command runs the legacy SkyRL (skyrl_train)" in r.stdout + r.stderr
    assert "Reached max_training_steps" not in (_trial(workdir / "res") / "output.log").read_text()


@pytest.mark.parametrize(
    "space, script, says",
    [
        # today's space passes trainer.max_training_steps, which the legacy Hydra config does not have
        (
            "skyrl-text2sql",
            LEGACY,
            (
                "trial 0: the command runs the legacy SkyRL (skyrl_train)",
                "'trainer.max_training_steps'",
                "use --space skyrl-text2sql-legacy",
            ),
        ),
        # a legacy key that moved under generator.inference_engine in today's dataclasses
        (
            "skyrl-text2sql-legacy",
            TODAY,
            (
                "trial 0: the command runs today's SkyRL (skyrl.train): its GeneratorConfig "
                "has no field 'num_inference_engines'",
                "use --space skyrl-text2sql",
            ),
        ),
    ],
    ids=["today-space-on-legacy", "legacy-space-on-today"],
)
def test_a_refusal_by_the_other_layout_stops_at_once_naming_the_other_space(workdir: Path, space, script, says) -> None:
    if space == "skyrl-text2sql-legacy":  # the legacy space as a user would extend it, with a legacy-only key
        text = load_space(space).text.replace(
            "    trainer.logger: console\n", "    trainer.logger: console\n    generator.num_inference_engines: 2\n"
        )
        (workdir / "legacy.yaml").write_text(text)
        space = str(workdir / "legacy.yaml")
    r = run_cli(
        ["run", "--no-force-worst-case", *ONE, "--space", space, "--results", "res", "--", "bash", str(script)],
        workdir,
        ENV,
    )
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert all(s in last for s in says), last
    assert len(list((workdir / "res").glob("*/trial-*"))) == 1


def test_a_log_path_that_cannot_be_written_is_an_error_before_any_trial(workdir: Path) -> None:
    space = workdir / "space.yaml"
    text = (REPO / "nccl_tune" / "search_spaces" / "skyrl-text2sql.yaml").read_text()
    space.write_text(text.replace('trainer.log_path: "{trial_dir}/logs"', "trainer.log_path: /proc/no/such/logs"))
    r = run_cli(
        ["run", "--no-force-worst-case", *ONE, "--space", str(space), "--results", "res", "--", "bash", str(TODAY)],
        workdir,
        ENV,
    )
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert "trainer.log_path=/proc/no/such/logs: SkyRL writes its infra logs there and cannot" in line
    assert not list(workdir.glob("res/*/trial-*"))
