"""The fingerprint: NVML facts through the fake NVML, package versions of the command's own
environment, the trainer's commit read from git's files (checked against git itself)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from nccl_tune.gpu import NoGpuProbe, NvmlProbe
from nccl_tune.gpu_fake import FakeNvml, h100_node, write_state
from nccl_tune.nightly.fingerprint import Fingerprint, changes, git_head, probe_fingerprint


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "trainer"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "run.sh").write_text("echo hi\n")
    _git(r, "add", ".")
    _git(r, "-c", "user.email=a@b", "-c", "user.name=n", "commit", "-qm", "first")
    return r


def test_nvml_facts_come_from_the_probe(tmp_path, repo):
    state = tmp_path / "nvml.json"
    write_state(state, h100_node(8), driver_version="550.54.15", cuda_driver_version=12040)
    fp = probe_fingerprint(["bash", "run.sh"], cwd=repo, probe=NvmlProbe(FakeNvml(state)))
    assert (fp.gpu_model, fp.gpu_count, fp.gpu_memory_gib) == ("NVIDIA H100 80GB HBM3", 8, 79.65)
    assert (fp.driver_version, fp.cuda_version) == ("550.54.15", "12.4")
    assert fp.hardware == "8x NVIDIA H100 80GB HBM3"
    assert fp.trainer_commit == _git(repo, "rev-parse", "HEAD") and fp.trainer_branch == "main"
    assert fp.summary().startswith("8x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4")
    assert Fingerprint.from_json(fp.to_json()) == fp


def test_no_gpu_and_a_driver_that_reports_no_versions(tmp_path):
    fp = probe_fingerprint(["true"], cwd=tmp_path, probe=NoGpuProbe("none here"))
    assert fp.gpu_count == 0 and fp.hardware == "no GPU" and fp.driver_version is None
    state = tmp_path / "nvml.json"
    write_state(state, h100_node(2))
    fp2 = probe_fingerprint(["true"], cwd=tmp_path, probe=NvmlProbe(FakeNvml(state)))
    assert fp2.gpu_count == 2 and fp2.driver_version is None and fp2.cuda_version is None


def test_versions_are_those_of_the_commands_own_virtual_environment(tmp_path):
    # the command starts the venv's interpreter directly: its site-packages answer
    fp = probe_fingerprint([sys.executable, "-m", "pytest", "-q"], cwd=tmp_path, probe=NoGpuProbe(""))
    assert fp.torch_version == metadata.version("torch")
    assert (fp.trainer_package, fp.trainer_version) == ("pytest", metadata.version("pytest"))
    assert fp.trainer == f"pytest {metadata.version('pytest')}"


def test_git_head_in_a_worktree_with_packed_refs_and_detached(repo, tmp_path):
    wt = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "side", str(wt))
    (wt / "x").write_text("x")
    _git(wt, "add", "x")
    _git(wt, "-c", "user.email=a@b", "-c", "user.name=n", "commit", "-qm", "second")
    _git(repo, "pack-refs", "--all")
    assert git_head(wt / "x") == (_git(wt, "rev-parse", "HEAD"), "side")
    assert git_head(repo) == (_git(repo, "rev-parse", "HEAD"), "main")
    _git(repo, "checkout", "-q", "--detach")
    assert git_head(repo) == (_git(repo, "rev-parse", "HEAD"), None)
    assert git_head(tmp_path / "nowhere" / "deeper") == (None, None)


def test_changes_name_what_moved():
    base = dict(
        host="node-1",
        gpu_model="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        gpu_memory_gib=79.65,
        driver_version="550.54.15",
        cuda_version="12.4",
        torch_version="2.12.0",
        nccl_version="2.21.5",
        python_version="3.11.7",
        trainer_package=None,
        trainer_version=None,
        trainer_commit="a" * 40,
        trainer_branch="main",
        nccl_tune_version="0.1.0",
        recorded_at="2026-08-01T02:00:00+00:00",
    )
    a = Fingerprint(**base)
    b = Fingerprint(**{**base, "torch_version": "2.13.0", "driver_version": "555.42.02", "recorded_at": "later"})
    assert changes(a, b) == ("driver 550.54.15 -> 555.42.02", "torch 2.12.0 -> 2.13.0")
    assert changes(a, a) == () and changes(None, a) == ()
    c = Fingerprint(**{**base, "trainer_commit": "b" * 40})
    assert changes(a, c) == (f"trainer git {'a' * 12} (main) -> git {'b' * 12} (main)",)


def test_a_command_given_as_inline_code_longer_than_a_file_name_is_fingerprinted(tmp_path: Path) -> None:
    code = "import time\n" + "time.sleep(0)\n" * 40  # longer than NAME_MAX (255): not a path
    fp = probe_fingerprint([sys.executable, "-c", code], cwd=tmp_path, probe=NoGpuProbe("no GPU in this test"))
    assert fp.python_version and fp.trainer_commit is None  # tmp_path is no git checkout
