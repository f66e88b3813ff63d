"""The study's storage and folders, as a user meets them: read-only commands never write, a corrupt
database is called corrupt, trial folders are never taken over by another study, one run per study
at a time, and a study resumes only with the space it was created with."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import optuna
import pytest

from tests.tuner.conftest import NCCL_TUNE, TINY_SPACE, one_line_error, read_only, run_cli

pytestmark = pytest.mark.timeout(300)


def _args(study: str, *extra: str, space: Path = TINY_SPACE) -> list[str]:
    return ["run", "--space", str(space), "--study", study, "--trials", "1", "--confirm", "0", *extra, "--"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): _digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def one_study(workdir, tiny_command) -> Path:
    """``results/`` after a one-trial study ``a``."""
    proc = run_cli([*_args("a"), *tiny_command], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "results/a/trial-0000/result.json").is_file()
    return workdir / "results"


def test_report_and_export_never_write_to_the_storage(workdir, one_study):
    db = one_study / "nccl-tune.db"
    before = (_digest(db), db.stat().st_mtime_ns, sorted(os.listdir(one_study)))
    with read_only(db), read_only(one_study):  # a write of any kind would fail
        for args in (["report"], ["report", "--json"], ["export"], ["export", "--format", "env"]):
            proc = run_cli(args, cwd=workdir)
            assert proc.returncode == 0, (args, proc.stderr)
    assert (_digest(db), db.stat().st_mtime_ns, sorted(os.listdir(one_study))) == before

    empty = workdir / "empty.db"
    empty.write_bytes(b"")
    for cmd in ("report", "export"):
        one_line_error(
            run_cli([cmd, "--storage", f"sqlite:///{empty}"], cwd=workdir), "the database is empty (0 bytes)"
        )
    assert empty.stat().st_size == 0  # no schema was written into it
    for cmd in ("report", "export"):
        one_line_error(run_cli([cmd, "--results", "elsewhere"], cwd=workdir), "no such database")
    assert not (workdir / "elsewhere").exists()


def test_a_corrupt_database_is_called_corrupt_and_the_trial_folders_keep_every_result(workdir, one_study):
    db = one_study / "nccl-tune.db"
    folders = _snapshot(one_study / "a")
    with open(db, "r+b") as fh:  # a torn write: the header survives, the pages after it do not
        fh.truncate(db.stat().st_size // 2)
    for args in (["report"], ["export"], [*_args("a"), "true"]):
        line = one_line_error(run_cli(args, cwd=workdir), "the database is corrupt")
        assert "every trial's result is still in its trial folder" in line and "unreachable" not in line
    db.write_bytes(os.urandom(4096))  # not a database at all
    one_line_error(run_cli(["report"], cwd=workdir), "the database is corrupt (not a SQLite database)")
    assert _snapshot(one_study / "a") == folders


def test_trial_folders_are_never_taken_over_by_another_study(workdir, one_study, tiny_command):
    db = one_study / "nccl-tune.db"
    saved = workdir / "saved.db"
    db.rename(saved)
    folders = _snapshot(one_study / "a")
    # missing database: a new study 'a' would start over trial-0000
    line = one_line_error(run_cli([*_args("a"), *tiny_command], cwd=workdir), "results/a holds the trials of")
    assert "no longer holds" in line and "nothing was overwritten" in line
    # an emptied database (0 bytes)
    db.write_bytes(b"")
    one_line_error(run_cli([*_args("a"), *tiny_command], cwd=workdir), "results/a holds the trials of")
    # --storage pointing elsewhere, with the same --results
    other = f"sqlite:///{workdir}/other.db"
    line = one_line_error(run_cli([*_args("a", "--storage", other), *tiny_command], cwd=workdir), "holds the trials of")
    assert f"not of {other}" in line
    assert _snapshot(one_study / "a") == folders
    # the database that holds the study resumes it, in the same folder
    saved.replace(db)
    proc = run_cli([*_args("a"), *tiny_command], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert (one_study / "a/trial-0001/result.json").is_file()
    assert {k: v for k, v in _snapshot(one_study / "a").items() if k.startswith("trial-0000")} == {
        k: v for k, v in folders.items() if k.startswith("trial-0000")
    }


def test_trial_folders_from_before_study_ids_are_not_reused_by_a_new_study(workdir, one_study, tiny_command):
    (one_study / "a" / "study.json").unlink()  # as an older nccl-tune left it
    other = f"sqlite:///{workdir}/other.db"
    one_line_error(
        run_cli([*_args("a", "--storage", other), *tiny_command], cwd=workdir), "results/a already holds trial folders"
    )
    # the study that has them resumes and adopts the folder
    proc = run_cli([*_args("a"), *tiny_command], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((one_study / "a" / "study.json").read_text())["study"] == "a"


def _start_together(argvs: list[list[str]], cwd: Path, env: dict) -> list[subprocess.CompletedProcess]:
    procs = [
        subprocess.Popen(a, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs
    ]
    out = []
    for p, a in zip(procs, argvs):
        stdout, stderr = p.communicate(timeout=240)
        out.append(subprocess.CompletedProcess(a, p.returncode, stdout, stderr))
    return out


@pytest.mark.parametrize("attempt", range(3))
def test_two_runs_of_one_study_started_together_run_it_once(tmp_path, tiny_command, attempt):
    env = {**os.environ, "COLUMNS": "200", "TINY_STEP_S": "0.6"}
    argv = [str(NCCL_TUNE), *_args("same"), *tiny_command]
    runs = _start_together([argv, argv], tmp_path, env)
    codes = sorted(r.returncode for r in runs)
    assert codes == [0, 1], [(r.returncode, r.stderr[-2000:]) for r in runs]
    loser = next(r for r in runs if r.returncode == 1)
    line = one_line_error(loser, "study 'same' is being run by nccl-tune pid")
    assert "wait for it to finish or use another --study" in line and "alembic" not in loser.stderr
    study = optuna.load_study(study_name="same", storage=f"sqlite:///{tmp_path}/results/nccl-tune.db")
    assert [t.user_attrs["kind"] for t in study.trials] == ["baseline"]  # one baseline: one run ran it


def test_different_studies_started_together_on_a_fresh_database_both_run(tmp_path, tiny_command):
    env = {**os.environ, "COLUMNS": "200"}
    runs = _start_together([[str(NCCL_TUNE), *_args(f"s{i}"), *tiny_command] for i in range(3)], tmp_path, env)
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr[-2000:] for r in runs]


def test_the_lock_of_a_dead_run_is_taken_over(workdir, one_study, tiny_command):
    lock = one_study / "a" / ".lock"
    lock.write_text("nccl-tune pid 4194000 on nowhere since 2020-01-01 00:00:00")  # its holder is gone
    proc = run_cli([*_args("a"), *tiny_command], cwd=workdir)
    assert proc.returncode == 0, proc.stderr


def test_a_changed_space_file_does_not_resume_the_study_silently(workdir, tiny_command):
    space = workdir / "space.yaml"
    space.write_text(TINY_SPACE.read_text())
    assert run_cli([*_args("sp", space=space), *tiny_command], cwd=workdir).returncode == 0
    space.write_text("# a comment changes nothing\n" + TINY_SPACE.read_text())
    assert run_cli([*_args("sp", space=space), *tiny_command], cwd=workdir).returncode == 0
    space.write_text(TINY_SPACE.read_text().replace("high: 8", "high: 4"))
    line = one_line_error(
        run_cli([*_args("sp", space=space), *tiny_command], cwd=workdir), "created with other content"
    )
    assert "--study NEW" in line and "restore the original file" in line


def test_run_into_a_read_only_results_folder_is_one_line(workdir, tiny_command):
    results = workdir / "ro"
    results.mkdir()
    with read_only(results):
        line = one_line_error(
            run_cli([*_args("x", "--results", str(results)), *tiny_command], cwd=workdir), str(results)
        )
    assert "--results" in line


def test_an_in_memory_storage_leaves_no_lock_file_behind(tmp_path, monkeypatch):
    from nccl_tune.tuner.records.storage import open_storage, sqlite_path

    monkeypatch.chdir(tmp_path)
    assert sqlite_path("sqlite:///:memory:") is None
    open_storage("sqlite:///:memory:")
    assert list(tmp_path.iterdir()) == []


def test_a_study_of_the_same_name_in_another_storage_is_neither_swept_nor_waited_on(tmp_path, monkeypatch):
    """Two folders, one study name, one node: resuming one study must not kill the other's trial
    (its processes carry the other storage in their marker), and its gate must not wait on them."""
    import sys
    import time

    from nccl_tune.launchers.local import LocalLauncher
    from nccl_tune.launchers.teardown import MARKER_ENV, find_marked, study_match
    from nccl_tune.tuner.records.storage import marker_scope

    monkeypatch.chdir(tmp_path)
    mine = marker_scope("s", "sqlite:///a/nccl-tune.db")
    assert mine == marker_scope("s", f"sqlite:///{tmp_path}/a/nccl-tune.db")  # one file, however it is named
    theirs = marker_scope("s", "sqlite:///b/nccl-tune.db")
    assert len({mine, theirs, marker_scope("t", "sqlite:///a/nccl-tune.db")}) == 3
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, MARKER_ENV: f"{theirs}/0"},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not find_marked(study_match(theirs)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert find_marked(study_match(theirs)), "the other study's trial never showed its marker"
        launcher = LocalLauncher(gate_timeout_s=1.0)
        assert launcher.reap(mine) == []
        assert not launcher.gpu_gate.look(mine).marked and launcher.gpu_gate.look(theirs).marked
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_run_refused_after_its_folder_was_made_removes_only_that_folder(tmp_path):
    """The lock's folder is made just before the study is opened: when the run stops there, the folder
    it made goes, and a folder that holds anything else stays."""
    from nccl_tune.errors import NcclTuneError
    from nccl_tune.tuner.records.storage import hold_study

    fresh = tmp_path / "new-results" / "study"
    with pytest.raises(NcclTuneError):
        with hold_study(fresh, "study"):
            raise NcclTuneError("refused")
    assert not (tmp_path / "new-results").exists()
    kept = tmp_path / "results" / "old"
    kept.mkdir(parents=True)
    (kept / "trial-0000").mkdir()
    with pytest.raises(NcclTuneError):
        with hold_study(kept, "old"):
            raise NcclTuneError("refused")
    assert (kept / "trial-0000").is_dir()
    made = tmp_path / "made"
    with hold_study(made / "s", "s"):
        (made / "s" / "study.json").write_text("{}")
    assert (made / "s" / "study.json").is_file()
