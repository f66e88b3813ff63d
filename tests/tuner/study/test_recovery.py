"""Resuming after a tuner that was killed: a trial that had finished (result.json written) but was
never told to Optuna keeps its result; one that had not is recorded as interrupted and run again."""

from __future__ import annotations

import json
import shutil
import socket

import optuna
from optuna.trial import TrialState

from nccl_tune.tuner.records import study_records as R
from tests.tuner.conftest import TINY_SPACE, run_cli


def _orphan_running_trial(storage: str, study_name: str, values: dict, trial_dir, dead_pid: int) -> int:
    """A RUNNING trial as a SIGKILLed tuner leaves it: values, folder, host and a dead tuner pid."""
    study = optuna.load_study(study_name=study_name, storage=storage)
    trial = study.ask()
    for key, value in (
        (R.A_VALUES, values),
        (R.A_TRIAL_DIR, str(trial_dir)),
        (R.A_HOST, socket.gethostname()),
        (R.A_PID, dead_pid),
        (R.A_KIND, "search"),
    ):
        trial.set_user_attr(key, value)
    return trial.number


def _first_run(workdir, tiny_command, study: str):
    """One trial of the tiny trainer in ``study``: (the run's arguments, its output, the storage URL)."""
    args = [
        "run",
        "--no-force-worst-case",
        "--space",
        str(TINY_SPACE),
        "--study",
        study,
        "--trials",
        "1",
        "--confirm",
        "0",
        "--json",
        "--",
        *tiny_command,
    ]
    first = run_cli(args, cwd=workdir)
    assert first.returncode == 0, first.stderr
    return args, first, f"sqlite:///{workdir}/results/nccl-tune.db"


def test_finished_results_survive_a_killed_tuner_and_unfinished_trials_run_again(workdir, tiny_command):
    args, first, storage = _first_run(workdir, tiny_command, "k")
    done = workdir / "results" / "k" / "trial-0000"
    values = json.loads(first.stdout)["trials"][0]["params"]

    # trial 1 finished and wrote result.json, then the tuner died before telling Optuna
    finished = _orphan_running_trial(
        storage, "k", {**values, "trainer.micro": 2}, workdir / "results/k/trial-0001", 2**22 + 7
    )
    shutil.copytree(done, workdir / "results/k/trial-0001")
    res = json.loads((done / "result.json").read_text())
    res["number"] = finished
    (workdir / "results/k/trial-0001/result.json").write_text(json.dumps(res))
    # trial 2 was still running: its folder has spec.json only
    unfinished = _orphan_running_trial(
        storage, "k", {**values, "trainer.micro": 4}, workdir / "results/k/trial-0002", 2**22 + 9
    )
    (workdir / "results/k/trial-0002").mkdir()
    (workdir / "results/k/trial-0002/spec.json").write_text("{}")

    second = run_cli(args, cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert f"trial {finished}: recovered its finished result (ok)" in second.stderr
    assert f"trial {unfinished}: interrupted before it finished; it will be run again" in second.stderr
    trials = {t.number: t for t in optuna.load_study(study_name="k", storage=storage).trials}
    assert trials[finished].state is TrialState.COMPLETE and trials[finished].user_attrs["status"] == "ok"
    assert trials[unfinished].state is TrialState.FAIL and trials[unfinished].user_attrs["status"] == "interrupted"
    assert json.loads((workdir / "results/k/trial-0002/result.json").read_text())["status"] == "interrupted"
    # the interrupted values were the next trial launched
    retry = trials[unfinished + 1]
    assert retry.user_attrs["kind"] == "retry" and retry.user_attrs["values"]["trainer.micro"] == 4
    assert retry.user_attrs["status"] in ("ok", "oom")


def test_a_trial_asked_but_never_started_by_a_killed_tuner_resumes_without_a_folder(workdir):
    """The tuner died between asking for values and creating the trial folder: the trial is
    RUNNING with a folder that does not exist. The next run records it interrupted and goes on."""
    from tests.tuner.conftest import run_twin

    # two measured steps each: a third step can pin the worst case's slope and, by the run's
    # noise, judge the baseline unfit (exit 2), which is not what this test is about
    args = ["--study", "n", "--trials", "1", "--confirm", "0", "--steps", "2", "--json"]
    first = run_twin(args, cwd=workdir)
    assert first.returncode == 0, first.stderr
    storage = f"sqlite:///{workdir}/results/nccl-tune.db"
    values = json.loads(first.stdout)["trials"][0]["params"]
    missing = workdir / "results" / "n" / "trial-0001"
    orphan = _orphan_running_trial(storage, "n", values, missing, 2**22 + 11)
    second = run_twin(args, cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert "FileNotFoundError" not in second.stderr and "Traceback" not in second.stderr
    assert f"trial {orphan}: interrupted before it finished; it will be run again" in second.stderr
    trials = {t.number: t for t in optuna.load_study(study_name="n", storage=storage).trials}
    assert trials[orphan].state is TrialState.FAIL and trials[orphan].user_attrs["status"] == "interrupted"


class _PeekingSampler(optuna.samplers.RandomSampler):
    """Random search that notes what the storage holds of the trial it proposes for."""

    seen: dict | None = None

    def sample_relative(self, study, trial, search_space):
        (running,) = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        self.seen = dict(running.user_attrs)
        return super().sample_relative(study, trial, search_space)


def test_a_trial_is_the_tuners_before_its_sampler_proposes(tmp_path):
    """A tuner killed while the sampler chooses values (the local planner's fits take seconds on a
    long study) leaves a running trial that names its host and pid, so the next run settles it."""
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.tuner.records.sampling import suggest
    from nccl_tune.tuner.settings import RunSettings
    from nccl_tune.tuner.trials.trial_run import TrialRunner

    space = load_space(str(TINY_SPACE))
    sampler = _PeekingSampler(seed=1)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db", study_name="p", sampler=sampler)
    settings = RunSettings(command=("true",), space=str(TINY_SPACE))
    runner = TrialRunner(space, None, settings, "p", None, None, None, host="node-7")  # ask needs the host alone
    trial = runner.ask(study)
    suggest(trial, space, {})
    assert sampler.seen is not None and sampler.seen[R.A_HOST] == "node-7" and sampler.seen[R.A_PID] > 0


def test_a_trial_killed_before_its_values_were_chosen_is_settled_on_resume(workdir, tiny_command):
    args, _, storage = _first_run(workdir, tiny_command, "v")
    trial = optuna.load_study(study_name="v", storage=storage).ask()
    trial.set_user_attr(R.A_HOST, socket.gethostname())
    trial.set_user_attr(R.A_PID, 2**22 + 13)  # a tuner that is gone
    second = run_cli(args, cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert f"trial {trial.number}: interrupted before its values were chosen" in second.stderr
    trials = {t.number: t for t in optuna.load_study(study_name="v", storage=storage).trials}
    assert trials[trial.number].state is TrialState.FAIL and trials[trial.number].user_attrs["status"] == "interrupted"
    assert not [t for t in trials.values() if t.state is TrialState.RUNNING]
    assert sum(t.user_attrs.get("status") == "ok" for t in trials.values()) == 2
