"""A stand-in for the NVML module on machines without a GPU (tests and demos only).

``FakeNvml(path)`` offers the ``pynvml`` functions that ``NvmlProbe`` calls, answering from a
JSON state file that is re-read on every call, so a test (or another process) can change
what the "GPUs" hold while a study runs. Selected by ``NCCL_TUNE_FAKE_NVML=<path>``.

State file::

    {"driver_version": "550.54.15", "cuda_driver_version": 12040,   # optional
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "total_gib": 80, "used_gib": 0.5,
               "processes": [{"pid": 1234, "used_gib": 40.0}],
               "ecc": {"enabled": true, "uncorrected_volatile": 0, "uncorrected_aggregate": 0},
               "nvlink": {"active": 18, "total": 18}}]}

``processes`` entries add to ``used_gib``; a process whose pid no longer exists is dropped,
as the driver frees a dead process's memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nccl_tune.atomic import write_json_atomic

GIB = 1 << 30


class FakeNvmlError(Exception):
    pass


def write_state(path: str | os.PathLike, gpus: list[dict[str, Any]], **system: Any) -> None:
    """Write a state file atomically (readers never see half a file); ``system`` adds node-wide
    keys (``driver_version``, ``cuda_driver_version``)."""
    write_json_atomic(path, {**system, "gpus": gpus})


def h100_node(n: int = 8, used_gib: float = 0.5) -> list[dict[str, Any]]:
    """State for an idle 8xH100 node."""
    return [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "total_gib": 79.65,
            "used_gib": used_gib,
            "processes": [],
            "ecc": {"enabled": True, "uncorrected_volatile": 0, "uncorrected_aggregate": 0},
            "nvlink": {"active": 18, "total": 18},
        }
        for _ in range(n)
    ]


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (read from ``/proc``, no signal sent); a zombie has already released
    its GPU memory, as with the driver."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
    except (OSError, IndexError):
        return True


class FakeNvml:
    """Module-like object with the subset of ``pynvml`` that ``NvmlProbe`` uses."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVMLError = FakeNvmlError

    def __init__(self, state_path: str | os.PathLike) -> None:
        self._path = Path(state_path)

    def _gpus(self) -> list[dict[str, Any]]:
        try:
            return json.loads(self._path.read_text())["gpus"]
        except (OSError, ValueError, KeyError) as exc:
            raise FakeNvmlError(f"fake NVML state {self._path} unreadable: {exc}") from exc

    def _system(self, key: str) -> Any:
        try:
            value = json.loads(self._path.read_text()).get(key)
        except (OSError, ValueError) as exc:
            raise FakeNvmlError(f"fake NVML state {self._path} unreadable: {exc}") from exc
        if value is None:
            raise FakeNvmlError("Not Supported")
        return value

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._system("driver_version"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._system("cuda_driver_version"))

    def _gpu(self, handle: int) -> dict[str, Any]:
        return self._gpus()[handle]

    def nvmlInit(self) -> None:
        self._gpus()

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self._gpus())

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._gpu(h)["name"]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake-{h:04d}"

    def _live_procs(self, gpu: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in gpu.get("processes", []) if _alive(int(p["pid"]))]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        g = self._gpu(h)
        used = float(g.get("used_gib", 0.0)) + sum(float(p["used_gib"]) for p in self._live_procs(g))
        total = float(g["total_gib"])
        return SimpleNamespace(total=int(total * GIB), used=int(used * GIB), free=int((total - used) * GIB))

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=int(p["pid"]), usedGpuMemory=int(float(p["used_gib"]) * GIB))
            for p in self._live_procs(self._gpu(h))
        ]

    def nvmlDeviceGetEccMode(self, h: int) -> tuple[int, int]:
        ecc = self._gpu(h).get("ecc")
        if ecc is None:
            raise FakeNvmlError("Not Supported")
        on = int(bool(ecc.get("enabled")))
        return (on, on)

    def nvmlDeviceGetTotalEccErrors(self, h: int, err_type: int, counter: int) -> int:
        ecc = self._gpu(h).get("ecc") or {}
        key = "uncorrected_volatile" if counter == self.NVML_VOLATILE_ECC else "uncorrected_aggregate"
        return int(ecc.get(key, 0))

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        nv = self._gpu(h).get("nvlink")
        if nv is None or link >= int(nv.get("total", 0)):
            raise FakeNvmlError("Not Supported")
        return int(link < int(nv.get("active", 0)))
