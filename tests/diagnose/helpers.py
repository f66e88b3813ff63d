"""Helpers for diagnose tests: reading the labelled fixtures, composing logs in real formats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "failure-logs"
SHARED_FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "failure-logs"


@dataclass(frozen=True)
class LabelledLog:
    """One fixture: its expected class and its log lines (the header removed)."""

    name: str
    label: str
    lines: list[str]
    header_lines: int


def read_fixture(path: Path) -> LabelledLog:
    """Split a fixture into its ``# label:`` and the log lines after ``# ---``."""
    lines = path.read_text().splitlines(keepends=True)
    label = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("# label:"))
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("# ---"))
    return LabelledLog(path.name, label, lines[cut + 1 :], cut + 1)


def fixture_paths() -> list[Path]:
    """Every labelled fixture, in name order."""
    return sorted(FIXTURES.glob("*.log"))


# --- real message formats, for composed logs ------------------------------------------------------

ESC = "\x1b"


def skyrl(
    message: str,
    *,
    level: str = "INFO",
    where: str = "skyrl_train.trainer:train:209",
    prefix: str = "skyrl_entrypoint pid=645566",
    colour: bool = True,
) -> str:
    """A SkyRL loguru line behind a Ray prefix, coloured the way loguru writes it into files."""
    if colour:
        return (
            f"{ESC}[36m({prefix}){ESC}[0m {ESC}[32m2026-03-02 10:11:12.345{ESC}[0m | {ESC}[1m{level:<8}{ESC}[0m | "
            f"{ESC}[36m{where}{ESC}[0m - {ESC}[1m{message}{ESC}[0m\n"
        )
    return f"({prefix}) 2026-03-02 10:11:12.345 | {level:<8} | {where} - {message}\n"


def started(phase: str) -> str:
    return skyrl(f"Started: '{phase}'")


def finished(phase: str, seconds: float = 81.23) -> str:
    return skyrl(f"Finished: '{phase}', time cost: {seconds:.2f}s")


def watchdog(
    rank: int,
    seq: int,
    op: str = "_ALLGATHER_BASE",
    numel_in: int = 68125120,
    numel_out: int = 545000960,
    timeout_ms: int = 600000,
    pg: bool = True,
) -> str:
    """The NCCL watchdog's timeout line as recent PyTorch prints it (with ``[rankN]:`` and PG prefix)."""
    where = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]" if pg else f"[Rank {rank}]"
    return (
        f"[rank{rank}]:[E1021 10:11:12.345678 ProcessGroupNCCL.cpp:632] {where} Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
        f"Timeout(ms)={timeout_ms}) ran for {timeout_ms + 12} milliseconds before timing out.\n"
    )


def watchdog_aftermath(rank: int) -> list[str]:
    """What follows a watchdog timeout on a rank: heartbeat/teardown lines and the abort."""
    return [
        f"[rank{rank}]:[E1021 10:11:13.000000 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
        "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
        "operations might run on corrupted/incomplete data.\n",
        f"[rank{rank}]:[E1021 10:11:13.000100 ProcessGroupNCCL.cpp:2174] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] To "
        "avoid data inconsistency, we are taking the entire process down.\n",
        "terminate called after throwing an instance of 'c10::DistBackendError'\n",
        "Fatal Python error: Aborted\n",
    ]


def cuda_oom(rank: int, gpu: int = 0, tried: str = "3.91 GiB", reserved: str = "171.53 MiB") -> list[str]:
    """A CUDA OOM traceback's last lines on one rank (torch 2.x wording)."""
    return [
        f"[rank{rank}]: Traceback (most recent call last):\n",
        f'[rank{rank}]:   File "/opt/venv/lib/python3.12/site-packages/skyrl_train/workers/worker.py", line 612, in ppo_train\n',
        f"[rank{rank}]:     loss.backward()\n",
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a total "
        f"capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB "
        f"memory in use. Of the allocated memory 74.40 GiB is allocated by PyTorch, and {reserved} is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n",
    ]


def nccl_info(rank: int, i: int) -> str:
    return (
        f"gpu-node-01:{4000 + rank}:{4100 + rank} [{rank}] NCCL INFO Channel {i % 32:02d}/0 : {rank}[{rank}] -> "
        f"{(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/CUMEM/read\n"
    )


def nccl_init_complete(rank: int, nranks: int = 8) -> str:
    return (
        f"gpu-node-01:{4000 + rank}:{4100 + rank} [{rank}] NCCL INFO comm 0x55d1c0{rank:02d} rank {rank} nranks "
        f"{nranks} cudaDev {rank} nvmlDev {rank} busId {rank}b000 commId 0x7a1c2b3d4e5f6071 - Init COMPLETE\n"
    )


def tqdm(label: str, done: int, total: int) -> str:
    bar = "█" * (40 * done // total)
    return f"{label}:  {100 * done // total}%|{bar:<40}| {done}/{total} [06:41<04:45,  2.15s/it]\r"
