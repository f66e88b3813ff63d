"""A study whose trials could not be ranked is refused before it spends time; a preset recognised
in the first trial's output is used for the rest of the study."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.tuner.conftest import TINY_SPACE, run_cli

pytestmark = pytest.mark.timeout(300)


def space_file(workdir, *, preset: str | None, samples: bool, semantic: bool):
    doc = yaml.safe_load(TINY_SPACE.read_text())
    doc["parameters"][0]["semantic"] = semantic
    if not samples:
        doc.pop("throughput")
    if preset:
        doc["progress"] = {"preset": preset}
    path = workdir / "space.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("dry", [True, False])
def test_steps_per_second_with_a_varying_batch_is_refused_before_any_trial(workdir, tiny_command, dry):
    # a preset whose lines give durations only (SkyRL's console dict, torchtune's metric line may
    # give a tokens rate: those are checked on the first trial's output, below)
    space = space_file(workdir, preset="lightning", samples=False, semantic=True)
    proc = run_cli(
        ["run", "--space", space, "--trials", "2", *(["--dry-run"] if dry else []), "--", *tiny_command], cwd=workdir
    )
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot be ranked" in lines[0] and "throughput.samples_per_step" in lines[0]
    assert not list(workdir.glob("results/*/trial-*"))


def test_pinning_the_batch_makes_steps_per_second_comparable(workdir, tiny_command):
    space = space_file(workdir, preset="skyrl", samples=False, semantic=True)
    proc = run_cli(["run", "--space", space, "--dry-run", "--set", "trainer.micro=2", "--", *tiny_command], cwd=workdir)
    assert proc.returncode == 0, proc.stderr


def test_a_recognised_preset_that_measures_steps_per_second_stops_the_study_after_its_first_trial(
    workdir, tiny_command
):
    space = space_file(workdir, preset=None, samples=False, semantic=True)
    proc = run_cli(["run", "--space", space, "--trials", "3", "--", *tiny_command], cwd=workdir)
    assert proc.returncode == 1
    assert "progress: the output reads as preset skyrl (trial 0)" in proc.stdout
    assert "cannot be ranked" in proc.stderr and "(trial 0 measured steps/s)" in proc.stderr
    assert [p.name for p in workdir.glob("results/*/trial-*")] == ["trial-0000"]


def test_the_recognised_preset_is_used_for_the_later_trials(workdir, tiny_command):
    space = space_file(workdir, preset=None, samples=True, semantic=False)
    proc = run_cli(
        ["run", "--space", space, "--trials", "2", "--confirm", "0", "--json", "--", *tiny_command], cwd=workdir
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("progress: the output reads as preset skyrl (trial 0)") == 1
    first, second = sorted(workdir.glob("results/*/trial-000[01]/spec.json"))
    assert json.loads(first.read_text())["progress_preset"] is None
    assert json.loads(second.read_text())["progress_preset"] == "skyrl"
    rows = json.loads(proc.stdout)["trials"]
    assert all(r["throughput_unit"] == "samples/s" for r in rows if r["status"] == "ok")
