"""A baseline that fails for a reason no value can fix stops the study after it, with one line
saying what to fix; so do several trials in a row failing the same way before any step. Memory
failures are the exception. Through the CLI, with the twin."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.tuner.conftest import error_lines, run_twin, study_trials, twin_space_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _python_without_torch(workdir: Path) -> dict[str, str]:
    """``PYTHON`` for the twin's script: this interpreter in an environment where torch is missing."""
    shadow = workdir / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    wrapper = workdir / "python-without-torch"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{shadow.parent}${{PYTHONPATH:+:$PYTHONPATH}}"\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return {"PYTHON": str(wrapper)}


def _space(workdir: Path, old: str, new: str) -> str:
    path = workdir / "space.yaml"
    text = twin_space_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return str(path)


def _case(name: str, workdir: Path) -> tuple[list[str], dict[str, str], str]:
    """(run options, env, what the error line says) of one unfixable baseline."""
    if name == "exit 0 without a step":  # a train batch larger than the prompts the data keeps
        return (
            ["--set", "trainer.train_batch_size=512", "--set", "trainer.max_prompt_length=2048"],
            {},
            "the command exited 0 without a step",
        )
    if name == "ModuleNotFoundError":
        return [], _python_without_torch(workdir), "before any step"
    if name == "no progress line before the start-up deadline":
        return ["--startup-timeout", "0.5s"], {}, "no progress line before the start-up deadline"
    if name == "a step rule that matches nothing":
        space = _space(
            workdir,
            "\nprogress:\n",
            '\nprogress:\n  step_end: "Finished: .no_such_phase., time cost: (?P<seconds>[0-9.]+)s"\n',
        )  # the preset's phase rules stay: only steps are never seen
        # and the trainer does not stop itself after the trial's steps, so the trial budget ends it
        Path(space).write_text(Path(space).read_text().replace('    trainer.max_training_steps: "{total_steps}"\n', ""))
        return (["--space", space, "--trial-timeout", "10s"], {}, "no step line within the trial budget")
    assert name == "config_error"
    space = _space(
        workdir, "    trainer.logger: console\n", "    trainer.logger: console\n    trainer.no_such_key: 1\n"
    )
    return (
        ["--space", space],
        {},
        "trial 0: Invalid fields {'no_such_key'} for TrainerConfig: the command has no such key",
    )


@pytest.mark.parametrize(
    "name",
    [
        "exit 0 without a step",
        "ModuleNotFoundError",
        "no progress line before the start-up deadline",
        "a step rule that matches nothing",
        "config_error",
    ],
)
def test_an_unfixable_baseline_stops_the_study_after_it(workdir, name):
    options, env, says = _case(name, workdir)
    proc = run_twin(["--trials", "5", *options], cwd=workdir, env=env)
    assert proc.returncode == 1, proc.stderr
    (line,) = error_lines(proc)
    assert says in line and "trial-0000/output.log" in line, line
    if name == "config_error":  # a refused key: the line names it and the fix, before the baseline rule
        assert "fix the space, the script or --set" in line, line
    else:
        assert "the baseline (trial 0, the command's own values) failed: " in line, line
        assert "no value the search tries can fix that: " in line, line
    assert "Traceback (most recent call last)" not in proc.stderr
    assert len(study_trials(workdir)) == 1
    if name == "ModuleNotFoundError":
        trial_dir = Path(line.split("(log: ")[1].rstrip(")")).parent
        assert "ModuleNotFoundError: No module named 'torch'" in json.dumps(
            json.loads((trial_dir / "result.json").read_text())
        )


def test_a_baseline_out_of_memory_does_not_stop_the_study(workdir):
    # every trial's rank runs out of memory in its first step: smaller values might fit, so go on
    proc = run_twin(["--trials", "2", "--confirm", "0", "--json"], cwd=workdir, env={"SIM_FAULT": "oom:0:1"})
    assert proc.returncode == 2, proc.stderr
    launched = [r for r in json.loads(proc.stdout)["trials"] if r["outcome"] == "launched"]
    assert launched[0]["kind"] == "baseline" and launched[0]["status"] == "oom"
    assert len(launched) == 2 and not error_lines(proc)


def test_three_trials_in_a_row_failing_the_same_way_before_any_step_stop_the_study(workdir):
    # no baseline (a default is missing), and no trial gets a progress line within 0.5 s
    space = _space(workdir, "    default: 8\n", "")
    proc = run_twin(["--space", space, "--trials", "6", "--startup-timeout", "0.5s"], cwd=workdir)
    assert proc.returncode == 1, proc.stderr
    (line,) = error_lines(proc)
    assert "3 trials in a row failed the same way before any step (hang, stopped: startup)" in line, line
    assert len([t for t in study_trials(workdir) if "result" in t.user_attrs]) == 3


def test_failures_that_share_a_forced_value_after_an_ok_trial_blame_the_value_not_the_node():
    from nccl_tune.errors import NcclTuneError
    from nccl_tune.failure import FailureClass, Verdict
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.trial import StopReason, TrialResult
    from nccl_tune.tuner.study.stop_rules import StopRules

    space = load_space("skyrl-text2sql")
    base = space.defaults()
    nvls = "allreduce:NVLS;allgather:NVLS;reducescatter:NVLS"

    def refused(number: int) -> TrialResult:
        return TrialResult(number, FailureClass.NCCL_ERROR, Verdict(FailureClass.NCCL_ERROR), StopReason.EXITED, 1)

    def three(values_of, never_ok: bool) -> None:
        rules = StopRules(space)
        for n, values in enumerate(values_of, start=1):
            rules.check(refused(n), kind="search", never_ok=never_ok, values=values)

    forced = [{**base, "NCCL_ALGO": nvls, "NCCL_PROTO": proto} for proto in ("unset", "Simple", "LL")]
    three(forced, never_ok=False)  # the baseline ran ok: NCCL_ALGO is to blame, the study goes on
    with pytest.raises(NcclTuneError, match="3 trials in a row failed the same way"):
        three(forced, never_ok=True)  # nothing ever ran: the command or the node
    varied = [{**base, "NCCL_ALGO": nvls}, {**base, "NCCL_PROTO": "LL"}, {**base, "NCCL_BUFFSIZE": 4194304}]
    with pytest.raises(NcclTuneError, match="3 trials in a row failed the same way"):
        three(varied, never_ok=False)  # nothing in common: the node broke


def test_trials_that_ended_in_their_nccl_check_blame_their_values_however_many_in_a_row():
    from dataclasses import replace

    from nccl_tune.errors import NcclTuneError
    from nccl_tune.failure import FailureClass, Verdict
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.trial import StopReason, TrialResult
    from nccl_tune.tuner.study.stop_rules import StopRules

    space = load_space("skyrl-text2sql")
    base = space.defaults()
    varied = [
        {**base, "NCCL_ALGO": "allreduce:NVLS"},
        {**base, "NCCL_PROTO": "LL"},
        {**base, "NCCL_BUFFSIZE": 4194304},
        {**base, "NCCL_PROTO": "LL128"},
    ]

    def hung(number: int, in_check: bool) -> TrialResult:
        return TrialResult(
            number, FailureClass.HANG, Verdict(FailureClass.HANG), StopReason.STALL, nccl_check_failed=in_check
        )

    rules = StopRules(space)
    for n, values in enumerate(varied, start=1):  # each failed its check, which others passed: the values
        rules.check(hung(n, True), kind="search", never_ok=False, values=values)
    rules = StopRules(space)
    with pytest.raises(NcclTuneError, match="3 trials in a row failed the same way"):
        for n, values in enumerate(varied, start=1):  # the same hangs in the trials themselves: the node
            rules.check(hung(n, False), kind="search", never_ok=False, values=values)
    assert replace(hung(1, True), number=2).nccl_check_failed
    assert TrialResult.from_json(hung(1, True).to_json()).nccl_check_failed


def test_refusals_in_a_row_after_an_ok_trial_are_the_values_doing_never_the_nodes():
    """A batch rule broken by three different combinations (each refused before a step): the command
    ran ``ok`` before, so the study goes on and the sampler learns the rule; before any ``ok`` trial
    the same three stop it (the command refuses whatever it is given)."""
    from nccl_tune.errors import NcclTuneError
    from nccl_tune.failure import FailureClass, Verdict
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.trial import StopReason, TrialResult
    from nccl_tune.tuner.study.stop_rules import StopRules

    space = load_space("skyrl-text2sql")
    base = space.defaults()
    combos = [
        {**base, "trainer.micro_train_batch_size_per_gpu": 8, "trainer.policy_mini_batch_size": 64},
        {**base, "trainer.micro_train_batch_size_per_gpu": 16, "trainer.train_batch_size": 128},
        {**base, "trainer.micro_forward_batch_size_per_gpu": 32, "trainer.policy_mini_batch_size": 32},
    ]

    def refused(number: int) -> TrialResult:
        verdict = Verdict(FailureClass.CONFIG_ERROR, advice="the batch sizes do not divide")
        return TrialResult(number, FailureClass.CONFIG_ERROR, verdict, StopReason.EXITED, 1)

    rules = StopRules(space)
    for n, values in enumerate(combos * 2, start=1):
        rules.check(refused(n), kind="search", never_ok=False, values=values)
    with pytest.raises(NcclTuneError, match="refused its configuration in trial 1"):
        StopRules(space).check(refused(1), kind="search", never_ok=True, values=combos[0])
