"""A command whose stdout is block-buffered in the pipe hands its step lines over at exit. Its
trials must never stick the study (the next run resumes it), be ranked or exported without a
throughput, nor go unexplained; ``PYTHONUNBUFFERED=1`` in every trial's environment spares a
Python trainer the problem, unless the space says otherwise."""

from __future__ import annotations

import sys

import pytest

from tests.tuner.conftest import SCRIPTS, run_cli

pytestmark = pytest.mark.timeout(240)

TRAINER = SCRIPTS / "buffered_trainer.py"

SPACE = """
name: late
parameters:
  - {name: trainer.micro, kind: pow2, low: 1, high: 4, default: 1, memory: increasing}
progress:
  step_end: 'train step (?P<step>\\d+) done'
  training_done: 'training over'
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 30, stall_timeout_s: 20, trial_timeout_s: 60, grace_s: 2}
"""

BURSTS = "step lines arrived in bursts"


def tune(tmp_path, *trainer_args: str, trials: int = 2, space: str = SPACE, output: bool = True):
    (tmp_path / "space.yaml").write_text(space)
    args = ["run", "--space", "space.yaml", "--study", "late", "--trials", str(trials), "--confirm", "0"]
    args += ["-o", "tuned.yaml"] if output else []
    return run_cli([*args, "--", sys.executable, str(TRAINER), *trainer_args], cwd=tmp_path)


@pytest.fixture(autouse=True)
def _no_unbuffered(monkeypatch):
    """The tuner runs as from a shell without PYTHONUNBUFFERED (``run_cli`` passes ``os.environ``)."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)


def test_steps_that_no_clock_can_time_are_counted_but_never_ranked_and_the_study_resumes(tmp_path):
    first = tune(tmp_path, "--stdio")
    shown = first.stdout + first.stderr
    assert first.returncode == 2 and "Traceback" not in shown, shown
    assert shown.count(BURSTS) == 1, "told once"
    assert "the wall clock cannot time them, so the trial has no throughput and is not ranked" in shown
    assert "trial 0 ok" in shown and "steps 5" in shown, "late lines are still steps (5 measured after 1 warm-up)"
    assert not (tmp_path / "tuned.yaml").exists(), "nothing without a throughput is exported"
    again = tune(tmp_path, "--stdio")
    shown = again.stdout + again.stderr
    assert again.returncode == 2 and "Traceback" not in shown and "math domain error" not in shown, shown
    assert "resum" in shown.lower() and "trial 2 " in shown, shown
    export = run_cli(["export", "--study", "late"], cwd=tmp_path)
    assert export.returncode == 2 and "no stable trial" in export.stderr and "None" not in export.stdout


def test_late_lines_with_their_own_timestamps_are_timed_by_them(tmp_path):
    proc = tune(tmp_path, "--stdio", "--stamp")
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown
    assert "they were timed by the timestamps they carry" in shown and shown.count(BURSTS) == 1
    tuned = (tmp_path / "tuned.yaml").read_text()
    assert "throughput_per_s: None" not in tuned and "throughput_unit: steps/s" in tuned
    # 0.2 s steps at micro=1, 0.05 s at micro=4: 5 and 20 steps/s, timed by the lines' own clock
    assert any(f"trial 0 ok  {x}" in shown for x in ("4.9", "5.0", "5.1")), shown


def test_a_python_trainer_s_print_is_unbuffered_in_every_trial(tmp_path):
    proc = tune(tmp_path)
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0 and BURSTS not in shown, shown
    (spec,) = tmp_path.glob("results/late/trial-0000/spec.json")
    assert '"PYTHONUNBUFFERED": "1"' in spec.read_text()


def test_a_space_may_keep_the_output_buffered(tmp_path):
    space = SPACE + 'trial:\n  env: {PYTHONUNBUFFERED: ""}\n'
    proc = tune(tmp_path, space=space, trials=1, output=False)
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 2 and BURSTS in shown and "Traceback" not in shown, shown
