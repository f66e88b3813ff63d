"""``run_doctor``: environment checks, GPU checks through the fake NVML (the real path's code), Ray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from nccl_tune.gpu import NoGpuProbe, NvmlProbe
from nccl_tune.gpu_fake import FakeNvml, h100_node, write_state
from nccl_tune.node import env_catalog as E
from nccl_tune.node.doctor import Check, DoctorReport, run_doctor


def _by_name(report: DoctorReport) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


@pytest.fixture
def no_gpu() -> NoGpuProbe:
    return NoGpuProbe("test: no GPU")


# --- environment -----------------------------------------------------------------------------------

ENV_CASES = [
    # (env, check name, status, words in detail, words in fix)
    (
        {"NCCL_TIMEOUT": "1800"},
        "env.NCCL_TIMEOUT",
        "warn",
        ["neither NCCL nor PyTorch reads"],
        ["SKYRL_WORKER_NCCL_TIMEOUT_IN_S"],
    ),
    (
        {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"},
        "env.TORCH_NCCL_TRACE_BUFFER_SIZE",
        "warn",
        ["deprecated spelling of TORCH_FR_BUFFER_SIZE"],
        ["export TORCH_FR_BUFFER_SIZE=2000"],
    ),
    (
        {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/tmp/x_"},
        "env.TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "warn",
        ["TORCH_FR_DUMP_TEMP_FILE"],
        ["TORCH_FR_DUMP_TEMP_FILE"],
    ),
    (
        {"NCCL_ASYNC_ERROR_HANDLING": "1"},
        "env.NCCL_ASYNC_ERROR_HANDLING",
        "warn",
        ["deprecated spelling of TORCH_NCCL_ASYNC_ERROR_HANDLING"],
        ["TORCH_NCCL_ASYNC_ERROR_HANDLING=1"],
    ),
    ({"NCCL_BLOCKING_WAIT": "1"}, "env.NCCL_BLOCKING_WAIT", "warn", ["TORCH_NCCL_BLOCKING_WAIT"], []),
    ({"NCCL_DESYNC_DEBUG": "1"}, "env.NCCL_DESYNC_DEBUG", "warn", ["TORCH_NCCL_DESYNC_DEBUG"], []),
    ({"NCCL_PROTO": "LL,Simpel"}, "env.NCCL_PROTO", "fail", ["'Simpel'", "ncclInvalidUsage"], ["LL, LL128, Simple"]),
    ({"NCCL_PROTO": "^LL128"}, "env.nccl", "pass", [], []),
    ({"NCCL_PROTO": "allreduce:LL,simple;AllGather:Simple"}, "env.nccl", "pass", [], []),
    ({"NCCL_PROTO": "LL;Simple"}, "env.NCCL_PROTO", "fail", ["'Func:' prefix"], []),
    ({"NCCL_ALGO": "Ring,Tree"}, "env.nccl", "pass", [], []),
    ({"NCCL_ALGO": "NVLS,Rings"}, "env.NCCL_ALGO", "fail", ["'Rings'"], []),
    ({"NCCL_ALGO": "Bcast:Ring"}, "env.NCCL_ALGO", "fail", ["unknown collective"], []),
    ({"NCCL_DEBUG": "VERBOSE"}, "env.NCCL_DEBUG", "warn", ["not a level"], ["VERSION, WARN, INFO, ABORT, TRACE"]),
    ({"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "INIT,NET"}, "env.nccl", "pass", [], []),
    ({"NCCL_DEBUG_SUBSYS": "INIT,NETWORK"}, "env.NCCL_DEBUG_SUBSYS", "warn", ["NETWORK"], []),
    ({"NCCL_P2P_DISABLE": "yes"}, "env.NCCL_P2P_DISABLE", "fail", ["reads it as 0"], []),
    ({"NCCL_BUFFSIZE": "0x400000", "NCCL_MIN_NCHANNELS": "4"}, "env.nccl", "pass", [], []),
    ({"NCCL_MAX_NCHANNELS": "16ch"}, "env.NCCL_MAX_NCHANNELS", "warn", ["leading 16"], ["NCCL_MAX_NCHANNELS=16"]),
    ({"NCCL_BUFFSIZE": "010"}, "env.NCCL_BUFFSIZE", "warn", ["octal", "this is 8"], ["NCCL_BUFFSIZE=8"]),
    ({"NCCL_MIN_NCHANNELS": "08"}, "env.NCCL_MIN_NCHANNELS", "warn", ["leading 0"], ["NCCL_MIN_NCHANNELS=0"]),
    ({"NCCL_P2P_LEVEL": "NVL"}, "env.nccl", "pass", [], []),
    ({"NCCL_P2P_LEVEL": "NVLINK"}, "env.NCCL_P2P_LEVEL", "fail", ["not a path level"], ["LOC, NVL"]),
    ({"NCCL_PROTOCOL": "LL"}, "env.NCCL_PROTOCOL", "warn", ["did you mean NCCL_PROTO?"], ["rename it to NCCL_PROTO"]),
    (
        {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SECS": "600"},
        "env.TORCH_NCCL_HEARTBEAT_TIMEOUT_SECS",
        "warn",
        ["did you mean TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC?"],
        [],
    ),
    ({"NCCL_LL_THRESHOLD": "0"}, "env.NCCL_LL_THRESHOLD", "warn", ["removed"], ["NCCL_PROTO"]),
    ({"NCCL_IB_GDR_LEVEL": "2"}, "env.NCCL_IB_GDR_LEVEL", "warn", ["renamed"], ["NCCL_NET_GDR_LEVEL"]),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "5"}, "env.TORCH_NCCL_ASYNC_ERROR_HANDLING", "fail", ["0 (none)"], []),
    ({"TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}, "env.TORCH_DISTRIBUTED_DEBUG", "fail", ["OFF, INFO or DETAIL"], []),
    (
        {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"},
        "env.flight_recorder",
        "warn",
        ["TORCH_FR_BUFFER_SIZE is not set"],
        ["TORCH_FR_BUFFER_SIZE=2000"],
    ),
    ({"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_BUFFER_SIZE": "2000"}, "env.nccl", "pass", [], []),
    (
        {"TORCH_FR_DUMP_TEMP_FILE": "/nonexistent-dir-xyz/trace_"},
        "env.flight_recorder_dir",
        "warn",
        ["missing directory"],
        [],
    ),
    ({"SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "ten"}, "env.SKYRL_WORKER_NCCL_TIMEOUT_IN_S", "fail", ["positive integer"], []),
    ({"NCCL_SOCKET_IFNAME": "no_such_if0"}, "env.NCCL_SOCKET_IFNAME", "fail", ["matches no interface"], []),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "env.nccl", "pass", [], []),
    (
        {"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"},
        "env.NCCL_NSOCKS_PERTHREAD",
        "warn",
        ["runs NCCL_NSOCKS_PERTHREAD=8 as 4", "more than 64"],
        ["NCCL_NSOCKS_PERTHREAD=4"],
    ),
    ({"NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "8"}, "env.nccl", "pass", [], []),
    ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, "env.nccl", "pass", [], []),
    # our own variables, and NCCL_* names that images and build systems set, are not NCCL's business
    ({"NCCL_TUNE_TRIAL": "s/1", "NCCL_TUNE_FAKE_NVML": "/x", "NCCL_VERSION": "2.21.5"}, "env.nccl", "pass", [], []),
]


@pytest.mark.parametrize(
    ("env", "name", "status", "detail_words", "fix_words"),
    ENV_CASES,
    ids=[f"{c[1]}-{c[2]}-{i}" for i, c in enumerate(ENV_CASES)],
)
def test_env_checks(no_gpu: NoGpuProbe, env: dict, name: str, status: str, detail_words: list, fix_words: list) -> None:
    checks = _by_name(run_doctor(env=env, probe=no_gpu))
    assert name in checks, sorted(checks)
    c = checks[name]
    assert c.status == status, c
    for w in detail_words:
        assert w in c.detail, (w, c.detail)
    for w in fix_words:
        assert w in c.fix, (w, c.fix)
    env_checks = [c for c in checks.values() if c.name.startswith("env.")]
    if status == "pass":
        assert [c.status for c in env_checks] == ["pass"]


def test_old_and_new_spelling_both_set_says_which_wins(no_gpu: NoGpuProbe) -> None:
    env = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "20", "TORCH_FR_BUFFER_SIZE": "2000"}
    c = _by_name(run_doctor(env=env, probe=no_gpu))["env.TORCH_NCCL_TRACE_BUFFER_SIZE"]
    assert "TORCH_FR_BUFFER_SIZE=2000 is also set and wins" in c.detail


def test_report_exit_code_and_json(no_gpu: NoGpuProbe) -> None:
    bad = run_doctor(env={"NCCL_PROTO": "bogus", "NCCL_TIMEOUT": "5"}, probe=no_gpu)
    assert bad.exit_code == 1
    j = bad.to_json()
    assert j["ok"] is False and j["exit_code"] == 1
    assert {c["name"] for c in j["checks"]} >= {
        "gpu.visible",
        "env.NCCL_PROTO",
        "env.NCCL_TIMEOUT",
        "limits.nofile",
        "host.shm",
        "ray",
    }
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in j["checks"])
    warn_only = run_doctor(env={"NCCL_TIMEOUT": "5"}, probe=no_gpu)
    assert warn_only.exit_code == 0


def test_without_a_gpu_it_says_so_and_checks_the_rest(no_gpu: NoGpuProbe) -> None:
    checks = _by_name(run_doctor(env={}, probe=no_gpu))
    assert checks["gpu.visible"].status == "warn" and "test: no GPU" in checks["gpu.visible"].detail
    assert not any(n.startswith("gpu.") and n != "gpu.visible" for n in checks)
    assert {"env.nccl", "limits.nofile", "host.shm", "ray"} <= set(checks)


def _names_in_binary(path: Path, prefixes: tuple[bytes, ...]) -> set[str]:
    import mmap
    import re

    token = re.compile(rb"[A-Z0-9_]*")
    found: set[str] = set()
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for prefix in prefixes:
            at = mm.find(prefix)
            while at != -1:
                m = token.match(mm, at + len(prefix))
                name = (prefix + m.group(0)).decode().rstrip("_")
                before = mm[at - 1 : at] if at else b"\x00"
                # a string constant, not a C++ symbol's mangled name (``_ZN4c10dL24TORCH_..._WAITE``)
                if name != prefix.decode().rstrip("_") and not before.isalnum():
                    found.add(name)
                at = mm.find(prefix, at + 1)
    return found


def test_catalogue_knows_the_names_torch_2_13_carries() -> None:
    """Every TORCH_FR_*/TORCH_NCCL_* name in the installed torch's binaries is known or known as renamed."""
    import torch

    names: set[str] = set()
    for lib in Path(torch.__file__).parent.joinpath("lib").glob("libtorch*.so"):
        names |= _names_in_binary(lib, (b"TORCH_NCCL_", b"TORCH_FR_"))
    assert "TORCH_FR_BUFFER_SIZE" in names, "torch's binaries should name its Flight Recorder variables"
    unknown = {n for n in names if n not in E.known_names() and n not in E.RENAMED}
    assert not unknown, unknown


# --- GPUs through the fake NVML ------------------------------------------------------------------------


@pytest.fixture
def holder() -> Iterator[int]:
    """A live process to stand for one holding GPU memory."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def _probe(tmp_path: Path, gpus: list[dict]) -> NvmlProbe:
    path = tmp_path / "nvml.json"
    write_state(path, gpus)
    return NvmlProbe(FakeNvml(path))


def test_healthy_node(tmp_path: Path) -> None:
    checks = _by_name(run_doctor(env={}, probe=_probe(tmp_path, h100_node(8))))
    assert checks["gpu.visible"].status == "pass"
    assert "8 GPU(s): 8 x NVIDIA H100 80GB HBM3" in checks["gpu.visible"].detail
    assert checks["gpu.memory"].status == "pass"
    assert checks["gpu.ecc"].status == "pass"
    assert checks["gpu.nvlink"].status == "pass" and "18 per GPU" in checks["gpu.nvlink"].detail


def test_process_holding_gpu_memory_is_named(tmp_path: Path, holder: int) -> None:
    gpus = h100_node(2)
    gpus[1]["processes"] = [{"pid": holder, "used_gib": 41.5}]
    c = _by_name(run_doctor(env={}, probe=_probe(tmp_path, gpus)))["gpu.memory"]
    assert c.status == "warn"
    assert f"GPU 1: pid {holder} (python" in c.detail and "41.5 GiB" in c.detail
    assert f"kill {holder}" in c.fix


def test_memory_in_use_by_no_listed_process(tmp_path: Path) -> None:
    gpus = h100_node(2)
    gpus[0]["used_gib"] = 12.0
    c = _by_name(run_doctor(env={}, probe=_probe(tmp_path, gpus)))["gpu.memory"]
    assert c.status == "warn" and "GPU 0: 12.0 GiB in use by no listed process" in c.detail


@pytest.mark.parametrize(("volatile", "aggregate", "status"), [(0, 0, "pass"), (0, 3, "warn"), (2, 5, "fail")])
def test_ecc_errors(tmp_path: Path, volatile: int, aggregate: int, status: str) -> None:
    gpus = h100_node(4)
    gpus[2]["ecc"] = {"enabled": True, "uncorrected_volatile": volatile, "uncorrected_aggregate": aggregate}
    report = run_doctor(env={}, probe=_probe(tmp_path, gpus))
    c = _by_name(report)["gpu.ecc"]
    assert c.status == status
    if status != "pass":
        assert "GPU 2" in c.detail
    assert report.exit_code == (1 if status == "fail" else 0)


def test_nvlink_links_down(tmp_path: Path) -> None:
    gpus = h100_node(8)
    gpus[5]["nvlink"] = {"active": 16, "total": 18}
    c = _by_name(run_doctor(env={}, probe=_probe(tmp_path, gpus)))["gpu.nvlink"]
    assert c.status == "fail" and "GPU 5: 16/18 up" in c.detail


def test_pcie_gpus_without_nvlink_or_ecc(tmp_path: Path) -> None:
    gpus = [{"name": "NVIDIA L4", "total_gib": 22.5, "used_gib": 0.3, "processes": []} for _ in range(2)]
    checks = _by_name(run_doctor(env={}, probe=_probe(tmp_path, gpus)))
    assert "no NVLink" in checks["gpu.nvlink"].detail and checks["gpu.nvlink"].status == "pass"
    assert "not reported" in checks["gpu.ecc"].detail


def test_mixed_gpus_warn(tmp_path: Path) -> None:
    gpus = h100_node(1) + [{"name": "NVIDIA A100-SXM4-40GB", "total_gib": 39.4, "used_gib": 0.2, "processes": []}]
    c = _by_name(run_doctor(env={}, probe=_probe(tmp_path, gpus)))["gpu.uniform"]
    assert c.status == "warn" and "A100" in c.detail and "H100" in c.detail


# --- Ray -----------------------------------------------------------------------------------------------


def _real_gcs_running(exclude: int | None = None) -> bool:
    return any(p.info.get("name") == "gcs_server" and p.pid != exclude for p in psutil.process_iter(["name"]))


def test_a_local_ray_head_is_found_by_its_gcs_process(tmp_path: Path, no_gpu: NoGpuProbe) -> None:
    fake = tmp_path / "gcs_server"
    shutil.copy(shutil.which("sleep"), fake)
    p = subprocess.Popen([str(fake), "60"])
    try:
        c = _by_name(run_doctor(env={"RAY_TMPDIR": str(tmp_path)}, probe=no_gpu))["ray"]
        assert c.status == "warn" and str(p.pid) in c.detail and "running" in c.detail
        assert "never reach them" in c.detail and "private Ray" in c.detail
    finally:
        p.kill()
        p.wait()


def test_a_zombie_gcs_process_is_no_running_cluster(tmp_path: Path, no_gpu: NoGpuProbe) -> None:
    """A Ray head that died but was never reaped leaves a ``gcs_server`` zombie: no cluster runs."""
    fake = tmp_path / "gcs_server"
    shutil.copy(shutil.which("true"), fake)
    p = subprocess.Popen([str(fake)])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        assert psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE
        c = _by_name(run_doctor(env={"RAY_TMPDIR": str(tmp_path)}, probe=no_gpu))["ray"]
        assert str(p.pid) not in c.detail, c.detail
        if not _real_gcs_running(exclude=p.pid):
            assert c.status == "pass" and "no local Ray cluster" in c.detail, c.detail
    finally:
        p.wait()


def _ray_check_without_ray(ray_tmpdir: Path) -> dict:
    """The doctor's ``ray`` check as ``nccl-tune doctor --json`` reports it, run in a new PID namespace
    (``unshare``, as root): there no Ray process of this machine's other tests or users is visible, so
    the check sees what a node without Ray shows. In-process when no Ray runs here and the namespace
    cannot be had."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {"RAY_TMPDIR": str(ray_tmpdir)}
    doctor = [sys.executable, "-m", "nccl_tune.cli", "doctor", "--json"]
    unshare = shutil.which("unshare")
    if unshare:
        done = subprocess.run(
            [unshare, "--pid", "--fork", "--mount-proc", *doctor], env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode in (0, 1) and done.stdout.startswith("{"):
            return next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "ray")
    if _real_gcs_running():
        pytest.skip("a Ray cluster is running on this machine and no PID namespace without it can be made")
    c = _by_name(run_doctor(env={"RAY_TMPDIR": str(ray_tmpdir)}, probe=NoGpuProbe("test: no GPU")))["ray"]
    return {"status": c.status, "detail": c.detail, "fix": c.fix}


def test_stale_ray_address_file_warns(tmp_path: Path) -> None:
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:1\n")
    c = _ray_check_without_ray(tmp_path)
    assert c["status"] == "warn" and "stale" in c["detail"] and "ray stop" in c["fix"]


def test_no_ray(tmp_path: Path) -> None:
    c = _ray_check_without_ray(tmp_path)
    assert c["status"] == "pass" and "no local Ray cluster" in c["detail"]
