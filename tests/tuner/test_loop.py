"""The tuning loop end to end, against a tiny real training command."""

from __future__ import annotations

import json
import sqlite3

import optuna
import pytest
import yaml
from omegaconf import OmegaConf

from tests.tuner.conftest import TINY_SPACE, run_cli

pytestmark = pytest.mark.timeout(300)


def tiny_run(workdir, tiny_command, *extra, trials=8, study="t"):
    return run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(TINY_SPACE),
            "--study",
            study,
            "--trials",
            str(trials),
            "--seed",
            "3",
            "--json",
            *extra,
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )


def test_study_finds_the_fastest_stable_config_and_exports_it(workdir, tiny_command):
    proc = tiny_run(workdir, tiny_command, "-o", "tuned.yaml", trials=10)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    rows = {r["number"]: r for r in summary["trials"]}
    # trial 0 is the baseline: the space's defaults, launched first
    assert rows[0]["kind"] == "baseline" and rows[0]["params"]["trainer.micro"] == 1
    assert rows[0]["status"] == "ok" and rows[0]["throughput_per_s"] > 0
    best = summary["best"]
    assert best["confirmed"] and len(best["trials"]) >= 2
    ok_rows = [r for r in summary["trials"] if r["status"] == "ok" and not r["near_wall"]]
    assert best["throughput_per_s"] >= 0.9 * max(r["throughput_per_s"] for r in ok_rows)
    # every launched micro=8 without offload ran out of memory and was recorded as such
    for r in summary["trials"]:
        if r["outcome"] == "launched" and r["params"]["trainer.micro"] == 8 and not r["params"]["trainer.offload"]:
            assert r["status"] == "oom", r
    # the tuned YAML: nested overrides that merge into a training config, env, args
    doc = yaml.safe_load((workdir / "tuned.yaml").read_text())
    assert doc["overrides"]["trainer"]["micro"] == best["params"]["trainer.micro"]
    assert f"trainer.micro={best['params']['trainer.micro']}" in doc["args"]
    assert doc["study"]["name"] == "t" and doc["metrics"]["throughput_per_s"] > 0
    base = OmegaConf.create({"trainer": {"micro": 1, "offload": False, "lr": 1e-6}})
    merged = OmegaConf.merge(base, OmegaConf.create(doc["overrides"]))
    assert merged.trainer.micro == best["params"]["trainer.micro"] and merged.trainer.lr == 1e-6


def test_export_formats_round_trip_from_storage_alone(workdir, tiny_command):
    assert tiny_run(workdir, tiny_command, trials=6).returncode in (0, 2)
    proc = run_cli(["export", "--study", "t", "--format", "args"], cwd=workdir)
    if proc.returncode == 2:
        pytest.skip("no stable config in 6 trials with this seed")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("trainer.micro=")
    env = run_cli(["export", "--format", "env"], cwd=workdir)
    assert env.returncode == 0 and ("export NCCL_ALGO=" in env.stdout or "unset NCCL_ALGO" in env.stdout)
    (workdir / "ppo.yaml").write_text("trainer:\n  micro: 1\n  offload: false\n  lr: 1.0e-6\n")
    yml = run_cli(["export", "-o", "tuned.yaml"], cwd=workdir)
    assert yml.returncode == 0, yml.stderr
    applied = run_cli(["apply", "tuned.yaml", "--into", "ppo.yaml"], cwd=workdir)
    assert applied.returncode == 0, applied.stderr
    merged = yaml.safe_load(applied.stdout)
    assert merged["trainer"]["lr"] == 1e-6 and f"trainer.micro={merged['trainer']['micro']}" in proc.stdout


def test_same_study_resumes_and_keeps_every_earlier_result(workdir, tiny_command):
    first = json.loads(tiny_run(workdir, tiny_command, "--confirm", "0", trials=3).stdout)
    second_proc = tiny_run(workdir, tiny_command, "--confirm", "0", trials=3)
    second = json.loads(second_proc.stdout)
    assert "resuming" in second_proc.stderr
    launched = lambda s: [r for r in s["trials"] if r["outcome"] == "launched"]  # noqa: E731
    assert len(launched(second)) == len(launched(first)) + 3
    before = {r["number"]: r["status"] for r in first["trials"]}
    after = {r["number"]: r["status"] for r in second["trials"]}
    assert all(after[n] == s for n, s in before.items())
    # the storage is plain Optuna: another tool reads the same study
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{workdir}/results/nccl-tune.db")
    assert len(study.trials) == len(second["trials"])


def test_failures_teach_the_sampler_and_known_ooms_are_not_relaunched(workdir, tiny_command):
    proc = tiny_run(workdir, tiny_command, "--confirm", "0", "--set", "trainer.offload=false", trials=12)
    summary = json.loads(proc.stdout)
    rows = summary["trials"]
    ooms = [r for r in rows if r["outcome"] == "launched" and r["status"] == "oom"]
    predicted = [r for r in rows if r["outcome"] == "predicted"]
    assert len(ooms) <= 2, "a config dominating a known OOM must not be launched again"
    for r in predicted:
        assert r["params"]["trainer.micro"] == 8 and r["status"] == "oom"
    # the twelve configs are run or ruled out before the twelve trials: the study ends there
    assert "every config of the space has been run or is ruled out" in proc.stderr
    # the sampler saw each failure as an infeasible COMPLETE trial (TPE learns nothing from FAIL)
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{workdir}/results/nccl-tune.db")
    for t in study.trials:
        if t.user_attrs.get("status") == "oom":
            assert t.state == optuna.trial.TrialState.COMPLETE and t.constraints["failed"] > 0


def test_config_error_stops_the_study_at_once(workdir, tiny_command):
    bad_space = workdir / "bad.yaml"
    bad_space.write_text(TINY_SPACE.read_text().replace("trainer.ckpt_path:", "trainer.not_a_key:"))
    proc = run_cli(
        ["run", "--no-force-worst-case", "--space", str(bad_space), "--trials", "5", "--", *tiny_command], cwd=workdir
    )
    assert proc.returncode == 1
    assert "Could not override 'trainer.not_a_key'" in proc.stderr
    assert "Traceback" not in proc.stderr
    con = sqlite3.connect(workdir / "results" / "nccl-tune.db")
    assert con.execute("select count(*) from trials").fetchone()[0] == 1


def test_a_crash_is_recorded_with_its_evidence_and_the_study_goes_on(workdir, tiny_command):
    space = workdir / "crashy.yaml"
    space.write_text(TINY_SPACE.read_text() + "\ncontext:\n  trainer.mode: ok\n")
    proc = run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(space),
            "--study",
            "c",
            "--trials",
            "2",
            "--confirm",
            "0",
            "--json",
            "--set",
            "trainer.mode=crash",
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )
    summary = json.loads(proc.stdout)
    launched = [r for r in summary["trials"] if r["outcome"] == "launched"]
    assert len(launched) == 2 and proc.returncode == 2
    assert all(r["status"] not in ("ok", None) for r in launched)
    assert any("Segmentation fault" in " ".join(r["evidence"]) or r["status"] == "crash" for r in launched)


def test_report_lists_failures_with_evidence_and_writes_plots(workdir, tiny_command):
    tiny_run(
        workdir,
        tiny_command,
        "--confirm",
        "0",
        "--set",
        "trainer.micro=8",
        "--set",
        "trainer.offload=false",
        trials=1,
        study="r",
    )
    tiny_run(workdir, tiny_command, "--confirm", "0", "--set", "trainer.micro=2", trials=1, study="r2")
    proc = run_cli(["report", "--study", "r", "--json", "--plots", "plots"], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (row,) = [r for r in data["trials"] if r["outcome"] == "launched"]
    assert row["status"] == "oom" and any("CUDA out of memory" in e for e in row["evidence"])
    assert "micro_train_batch_size_per_gpu" in row["advice"] and data["best"] is None
    assert all((workdir / p).stat().st_size > 0 for p in data["plots"])
    text = run_cli(["report", "--study", "r"], cwd=workdir)
    assert "failures" in text.stdout and "CUDA out of memory" in text.stdout and "no stable config" in text.stdout
    several = run_cli(["report"], cwd=workdir)
    assert several.returncode == 1 and "choose one with --study: r, r2" in several.stderr


@pytest.mark.slow
def test_running_the_same_command_again_says_it_resumes_and_keeps_the_previous_tuned_file(workdir):
    from tests.tuner.conftest import run_twin

    first = run_twin(["--trials", "1", "--confirm", "0", "-o", "tuned.yaml"], cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert "new study skyrl-text2sql-" in first.stdout and "running up to 1 trials" in first.stdout
    before = (workdir / "tuned.yaml").read_text()
    second = run_twin(["--trials", "2", "--confirm", "0", "-o", "tuned.yaml"], cwd=workdir)
    assert second.returncode == 0, second.stderr
    name = first.stdout.split("new study ")[1].split(":")[0]
    assert f"resuming study {name}: 1 trials done, running up to 2 more" in second.stdout
    assert "the previous tuned YAML is kept as tuned.prev.yaml" in second.stdout
    assert (workdir / "tuned.prev.yaml").read_text() == before
    assert yaml.safe_load((workdir / "tuned.yaml").read_text())["study"]["trials_in_study"] >= 3


@pytest.mark.slow
def test_the_default_study_name_includes_the_results_folder(workdir):
    from tests.tuner.conftest import run_twin

    shared = f"sqlite:///{workdir}/shared.db"
    runs = [
        run_twin(["--storage", shared, "--results", folder, "--trials", "1", "--confirm", "0"], cwd=workdir)
        for folder in ("a", "b")
    ]
    assert all(p.returncode == 0 for p in runs), [p.stderr for p in runs]
    names = [p.stdout.split("new study ")[1].split(":")[0] for p in runs]  # the second is a new study too
    assert names[0] != names[1]
    assert sorted(s.study_name for s in optuna.study.get_all_study_summaries(shared)) == sorted(names)
    assert (workdir / "a" / names[0] / "trial-0000").is_dir() and (workdir / "b" / names[1] / "trial-0000").is_dir()
