"""Reading the node's GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

One interface, ``GpuProbe``, with three implementations:

- ``NvmlProbe``: the real one. It takes the NVML module as an argument, so tests run this
  same code against ``nccl_tune.gpu_fake.FakeNvml`` on machines without a GPU.
- ``NoGpuProbe``: no GPU visible; every query returns nothing and ``reason`` says why.
- ``open_probe()`` picks one: the fake when ``NCCL_TUNE_FAKE_NVML`` names a state file
  (tests only), NVML when it initialises, ``NoGpuProbe`` otherwise.

Memory figures are GiB (2**30 bytes).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

GIB = float(1 << 30)
FAKE_NVML_ENV = "NCCL_TUNE_FAKE_NVML"


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    total_gib: float


@dataclass(frozen=True)
class GpuUsage:
    index: int
    used_gib: float
    total_gib: float


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_index: int
    used_gib: float | None
    """None when NVML does not report per-process memory (containers, MIG)."""


@dataclass(frozen=True)
class GpuHealth:
    index: int
    ecc_enabled: bool | None
    ecc_uncorrected_volatile: int | None
    """Uncorrectable ECC errors since the driver loaded (None when not reported)."""
    ecc_uncorrected_aggregate: int | None
    """Uncorrectable ECC errors over the GPU's lifetime."""
    nvlink_active: int | None
    """NVLink links up (None when NVML reports no NVLink)."""
    nvlink_total: int | None
    """NVLink links the GPU supports."""


@dataclass(frozen=True)
class GpuSystem:
    """Node-wide NVML facts (None when not reported)."""

    driver_version: str | None
    cuda_driver_version: str | None
    """The CUDA version the driver supports, e.g. ``12.4``."""


class GpuProbe(ABC):
    """Read-only view of the node's GPUs."""

    kind: str = "base"

    @property
    @abstractmethod
    def available(self) -> bool:
        """True when at least one GPU can be read."""

    @property
    def reason(self) -> str:
        """Why no GPU can be read (empty when ``available``)."""
        return ""

    @abstractmethod
    def devices(self) -> tuple[GpuInfo, ...]: ...

    @abstractmethod
    def usage(self) -> tuple[GpuUsage, ...]: ...

    @abstractmethod
    def processes(self) -> tuple[GpuProcess, ...]: ...

    @abstractmethod
    def health(self) -> tuple[GpuHealth, ...]: ...

    def system(self) -> GpuSystem:
        return GpuSystem(None, None)

    def close(self) -> None:
        pass


class NoGpuProbe(GpuProbe):
    kind = "none"

    def __init__(self, reason: str) -> None:
        self._reason = reason

    @property
    def available(self) -> bool:
        return False

    @property
    def reason(self) -> str:
        return self._reason

    def devices(self) -> tuple[GpuInfo, ...]:
        return ()

    def usage(self) -> tuple[GpuUsage, ...]:
        return ()

    def processes(self) -> tuple[GpuProcess, ...]:
        return ()

    def health(self) -> tuple[GpuHealth, ...]:
        return ()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlProbe(GpuProbe):
    """GPUs through an NVML module (``pynvml`` or a fake with the same functions)."""

    kind = "nvml"

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        nvml.nvmlInit()
        self._count = int(nvml.nvmlDeviceGetCount())
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._count)]

    @property
    def available(self) -> bool:
        return self._count > 0

    @property
    def reason(self) -> str:
        return "" if self._count else "NVML reports no GPU"

    def devices(self) -> tuple[GpuInfo, ...]:
        n = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            mem = n.nvmlDeviceGetMemoryInfo(h)
            out.append(GpuInfo(i, _text(n.nvmlDeviceGetName(h)), _text(n.nvmlDeviceGetUUID(h)), mem.total / GIB))
        return tuple(out)

    def usage(self) -> tuple[GpuUsage, ...]:
        n = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            mem = n.nvmlDeviceGetMemoryInfo(h)
            out.append(GpuUsage(i, mem.used / GIB, mem.total / GIB))
        return tuple(out)

    def processes(self) -> tuple[GpuProcess, ...]:
        n = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            for p in n.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                out.append(GpuProcess(int(p.pid), i, used / GIB if isinstance(used, int) else None))
        return tuple(out)

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn)(*args)
        except Exception:  # NVMLError_NotSupported and friends: the figure is simply unknown
            return None

    def health(self) -> tuple[GpuHealth, ...]:
        n = self._nvml
        out = []
        for i, h in enumerate(self._handles):
            mode = self._call("nvmlDeviceGetEccMode", h)
            ecc_on = None if mode is None else bool(mode[0])
            err = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            vol = self._call("nvmlDeviceGetTotalEccErrors", h, err, n.NVML_VOLATILE_ECC) if ecc_on else None
            agg = self._call("nvmlDeviceGetTotalEccErrors", h, err, n.NVML_AGGREGATE_ECC) if ecc_on else None
            active = total = 0
            for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))):
                state = self._call("nvmlDeviceGetNvLinkState", h, link)
                if state is None:
                    continue
                total += 1
                active += int(bool(state))
            out.append(
                GpuHealth(
                    i,
                    ecc_on,
                    None if vol is None else int(vol),
                    None if agg is None else int(agg),
                    active if total else None,
                    total if total else None,
                )
            )
        return tuple(out)

    def system(self) -> GpuSystem:
        driver = self._call("nvmlSystemGetDriverVersion")
        cuda = self._call("nvmlSystemGetCudaDriverVersion")
        return GpuSystem(
            None if driver is None else _text(driver),
            None if cuda is None else f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}",
        )

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def open_probe() -> GpuProbe:
    """The probe for this node: the fake NVML if ``NCCL_TUNE_FAKE_NVML`` is set, NVML when it
    initialises, else a ``NoGpuProbe`` saying why."""
    fake = os.environ.get(FAKE_NVML_ENV)
    if fake:
        from nccl_tune.gpu_fake import FakeNvml

        return NvmlProbe(FakeNvml(fake))
    try:
        import pynvml
    except ImportError:
        return NoGpuProbe("nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        return NvmlProbe(pynvml)
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NoGpuProbe(f"NVML unavailable: {exc}")
