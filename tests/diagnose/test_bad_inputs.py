"""`nccl-tune diagnose` on what is not a log: a real process on real files, one line on stderr, exit 1.

A binary file, an empty log, a named pipe or a device must never read as a healthy run, hang or
eat memory; a gzip'd log is read through; a folder's other binary files (core dumps,
checkpoints, Flight Recorder dumps) do not stop it.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from nccl_tune.diagnose.logfiles import not_a_text_log

from .helpers import FIXTURES, read_fixture

NCCL_TUNE = Path(sys.executable).parent / "nccl-tune"
CUDA_LOG = "".join(read_fixture(FIXTURES / "07_cuda_error.log").lines)


def diagnose(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(NCCL_TUNE), "diagnose", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


def refused(r: subprocess.CompletedProcess, path: Path | str, *words: str) -> str:
    """The one-line error naming ``path`` (and ``words``), exit 1, nothing on stdout."""
    err = r.stderr.strip()
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert "\n" not in err and err.startswith("error: diagnose: ") and str(path) in err, err
    for w in words:
        assert w in err, err
    return err


def test_a_real_binary_is_refused_not_ok(tmp_path: Path) -> None:
    binary = tmp_path / "binary.log"
    shutil.copyfile(sys.executable, binary)
    refused(diagnose(str(binary), cwd=tmp_path), binary, "not a text log")


def test_random_bytes_and_a_stray_nul_in_a_log(tmp_path: Path) -> None:
    noise = tmp_path / "noise.log"
    noise.write_bytes(b"\x01" + os.urandom(20000))  # not a pickle's first byte: that case comes next
    refused(diagnose(str(noise), cwd=tmp_path), noise, "binary data")
    # one random file in 256 opens with the byte a pickle opens with: it is binary data, not a pickle
    noise.write_bytes(b"\x80" + bytes((0x9C,)) + os.urandom(20000))
    refused(diagnose(str(noise), cwd=tmp_path), noise, "binary data")
    glitch = tmp_path / "glitch.log"  # one NUL and a Latin-1 byte in a real log: still a log
    glitch.write_bytes(b"step 1 \x00 caf\xe9\n" + CUDA_LOG.encode())
    r = diagnose("--json", str(glitch), cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["class"] == "cuda_error", r.stderr


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_an_empty_log_is_no_evidence_of_a_healthy_run(tmp_path: Path, content: bytes) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(content)
    refused(diagnose(str(empty), cwd=tmp_path), empty, "says nothing about the run")


def test_a_gzipped_log_is_read_through(tmp_path: Path) -> None:
    for name in ("run.log.gz", "archived-ci-output.gz"):
        gz = tmp_path / name
        with gzip.open(gz, "wt") as fh:
            fh.write(CUDA_LOG)
        r = diagnose("--json", str(gz), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["class"] == "cuda_error" and obj["evidence"][0].startswith(f"{name}:"), obj


def test_gzip_files_that_hold_no_log(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log.gz"
    with gzip.open(empty, "wb"):
        pass
    refused(diagnose(str(empty), cwd=tmp_path), empty, "empty gzip file")
    binary = tmp_path / "ls.gz"
    with gzip.open(binary, "wb") as fh:
        fh.write(Path(sys.executable).read_bytes()[:100000])
    refused(diagnose(str(binary), cwd=tmp_path), binary, "(inside gzip)")
    archive = tmp_path / "logs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = CUDA_LOG.encode()
        info = tarfile.TarInfo("output.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    refused(diagnose(str(archive), cwd=tmp_path), archive, "tar archive", "tar xf")


def test_a_truncated_gzip_log_is_one_line_with_what_to_do(tmp_path: Path) -> None:
    whole = gzip.compress("".join(f"[rank0]: step {i} loss {i * 7 % 13}\n" for i in range(200000)).encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    r = diagnose(str(cut), cwd=tmp_path)
    err = r.stderr.strip()
    assert r.returncode == 1 and "\n" not in err and "Traceback" not in r.stderr, r.stderr
    assert str(cut) in err and "truncated or damaged gzip file" in err
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b" + b"not deflate data at all" * 10)
    refused(diagnose(str(broken), cwd=tmp_path), broken, "damaged or truncated gzip file")


@pytest.mark.timeout(30)
def test_a_named_pipe_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    refused(diagnose(str(fifo), cwd=tmp_path, timeout=20), fifo, "named pipe")


@pytest.mark.timeout(30)
def test_a_folder_holding_a_named_pipe_still_reads_its_logs(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "output.log").write_text(CUDA_LOG)
    os.mkfifo(trial / "stream.log")
    r = diagnose("--json", str(trial), cwd=tmp_path, timeout=20)
    assert r.returncode == 0 and json.loads(r.stdout)["class"] == "cuda_error", r.stderr
    (trial / "facts.json").write_text(json.dumps({"logs": ["output.log", "stream.log"], "exit_code": 1}))
    refused(diagnose(str(trial), cwd=tmp_path, timeout=20), trial / "stream.log", "named pipe")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused(tmp_path: Path, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this system")
    refused(diagnose(device, cwd=tmp_path, timeout=20), device, "character device")


def test_a_folder_with_core_dumps_checkpoints_and_flight_recorder_dumps(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    (trial / "fr").mkdir(parents=True)
    (trial / "output.log").write_text(CUDA_LOG)
    (trial / "job.err").write_text("")  # an empty stderr file next to the log is normal
    shutil.copyfile(sys.executable, trial / "core.4242")
    (trial / "model.pt").write_bytes(os.urandom(4096))
    (trial / "state.pkl").write_bytes(pickle.dumps({"step": 3}))
    dump = trial / "fr" / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"entries": [], "version": "2.10", "pg_config": {}}))
    r = diagnose("--json", str(trial), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["class"] == "cuda_error" and str(dump) in obj["inputs"], obj
    assert not any(name in " ".join(obj["inputs"]) for name in ("core.4242", "model.pt", "state.pkl"))


def test_a_folder_whose_log_is_binary_names_it(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    shutil.copyfile(sys.executable, trial / "output.log")
    refused(diagnose(str(trial), cwd=tmp_path), trial / "output.log", "not a text log", "move it out")


def test_a_folder_of_empty_logs_needs_an_exit_status(tmp_path: Path) -> None:
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "output.log").write_text("")
    (trial / "job.err").write_text("")
    refused(diagnose(str(trial), cwd=tmp_path), trial, "hold no lines")
    (trial / "result.json").write_text(json.dumps({"exit_code": 1}))
    r = diagnose("--json", str(trial), cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["class"] == "crash", r.stderr


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("run log\n".encode("utf-16"), "UTF-16"),
        (b"\xfd7zXZ\x00" + os.urandom(3000), "xz -dk"),
        (b"\x28\xb5\x2f\xfd" + os.urandom(3000), "zstd -d"),
        (b"PK\x03\x04" + bytes(3000), "unzip"),
        (pickle.dumps({"entries": []}), "nccl_trace_rank_0"),
    ],
    ids=["utf-16", "xz", "zstd", "zip", "pickle"],  # random bytes in an id differ between pytest workers
)
def test_binary_formats_are_named_with_how_to_get_the_log(tmp_path: Path, content: bytes, what: str) -> None:
    path = tmp_path / "run.log"
    path.write_bytes(content)
    problem = not_a_text_log(path)
    assert problem is not None and problem.startswith(f"{path} is ") and what in problem, problem
