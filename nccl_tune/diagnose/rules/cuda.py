"""CUDA errors other than out of memory: ECC, device-side asserts, illegal accesses, lost or busy GPUs,
a build without this GPU's kernels, NCCL's CUDA failures, nccl-tests' and old PyTorch's wordings."""

from __future__ import annotations

from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import FailureClass as F

THC = r"(?:THCudaCheck FAIL file=\S+ line=\d+ error=(?P<code>\d+)|cuda runtime error \((?P<code2>\d+)\)) : "
"""The head of PyTorch's CUDA error before 1.5 (its THC library's check)."""


def _device_assert(ctx: AdviceContext) -> str:
    kernel, cond = ctx.details.get("kernel"), ctx.details.get("cond")
    what = f" ({kernel}: {cond})" if kernel and cond else ""
    return (
        f"A device-side assert{what}: usually an index out of range (token ids beyond the embedding/vocab size, "
        "labels out of range); check the tokenizer against the model; rerun with CUDA_LAUNCH_BLOCKING=1 for the op"
    )


def _nccl_cuda(ctx: AdviceContext) -> str:
    d = ctx.details
    if "nvls" in (d.get("where") or "").lower():
        return (
            f"NCCL's NVLS transport (NVLink SHARP multicast) failed a CUDA call ('{d.get('detail', '')}' in {d['where']}): "
            "multicast does not work on this node (its fabric manager, a VM or container, the driver): set "
            "NCCL_NVLS_ENABLE=0 and leave NCCL_ALGO=NVLS out of the search; `nvidia-smi -q` shows the fabric's state"
        )
    return (
        "NCCL hit a CUDA error (unhandled cuda error): rerun with NCCL_DEBUG=INFO to see the CUDA call; frequent "
        "causes are GPU memory exhausted by NCCL buffers (lower NCCL_BUFFSIZE) and NCCL_CUMEM_ENABLE with old drivers"
    )


ERRORS: tuple[Rule, ...] = (
    Rule(
        "cuda_ecc",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("ECC error", "uncorrectable ECC"),
        None,
        "ecc",
        advice="Uncorrectable ECC error: this GPU's memory is faulty; not a config problem: drain the node and have the GPU "
        "reset or replaced (`nvidia-smi -q -d ECC`)",
    ),
    Rule(
        "cuda_device_assert",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("device-side assert", "Assertion `"),
        rx(
            r"(?P<kernel>[\w:()<>]+): block: \[[^\]]*\], thread: \[[^\]]*\] Assertion `(?P<cond>[^`]+)` failed"
            r"|device-side assert"
        ),
        "device_assert",
        advice=_device_assert,
    ),
    Rule(
        "cuda_illegal_access",
        F.CUDA_ERROR,
        Kind.ROOT,
        (
            "illegal memory access",
            "illegal address",
            "misaligned address",
            "unspecified launch failure",
            "illegal instruction",
            "ILLEGAL_ADDRESS",
            "MISALIGNED_ADDRESS",
            "ILLEGAL_INSTRUCTION",
        ),
        None,
        "illegal_access",
        advice="Illegal memory access in a kernel: rerun with CUDA_LAUNCH_BLOCKING=1 to find it; if it is in NCCL, try "
        "NCCL_CUMEM_ENABLE=0 or another NCCL_PROTO; check `dmesg | grep Xid` for a hardware fault",
    ),
    Rule(
        "gpu_lost",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("fallen off the bus", "GPU is lost", "NVRM: Xid"),
        rx(r"fallen off the bus|GPU is lost|NVRM: Xid \([^)]*\): (?P<xid>\d+)"),
        "gpu_lost",
        advice="The GPU was lost (Xid / fell off the bus): a hardware or driver fault; drain the node (`dmesg | grep Xid`)",
    ),
    # cudaErrorDevicesUnavailable: another process holds the GPU in exclusive compute mode, or it cannot be used
    Rule(
        "gpu_busy",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy"),
        None,
        "gpu_busy",
        advice="The GPU is busy or unavailable to this process (cudaErrorDevicesUnavailable): another process holds it in "
        "exclusive compute mode, or the device cannot be used; `nvidia-smi` shows its compute mode and processes "
        "(`nccl-tune doctor` too): free it, or set the compute mode back to Default (`nvidia-smi -c 0`)",
    ),
    # a build with no code for this GPU's architecture (torch, or an extension: flash-attn, vLLM's kernels)
    Rule(
        "cuda_no_kernel_image",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("error: no kernel image",),
        None,
        "no_kernel_image",
        advice="This build has no GPU code for the device's architecture (no kernel image): install torch, or the "
        "extension in the traceback (flash-attn, vLLM's kernels), built for this GPU (H100: sm_90); "
        "`python -c 'import torch; print(torch.cuda.get_arch_list())'` lists what torch carries",
    ),
    Rule(
        "nccl_unhandled_cuda",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("unhandled cuda error", "ncclUnhandledCudaError"),
        None,
        "nccl_cuda",
        advice=_nccl_cuda,
    ),
    # NCCL's CUDACHECK warns "Cuda failure 'message'" and fails the call (its 'out of memory' is read by
    # ``memory``'s rules, tried first)
    Rule(
        "nccl_warn_cuda_failure",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("Cuda failure",),
        rx(r"(?:(?P<where>[\w./-]+\.(?:cc|cu|h)):\d+ )?NCCL WARN .*Cuda failure (?:\d+ )?'(?P<detail>[^']*)'"),
        "nccl_cuda",
        advice=_nccl_cuda,
    ),
    # nccl-tests' CUDACHECK prints "host: Test CUDA failure file.cu:N '<cudaGetErrorString>'": its
    # 'out of memory', illegal accesses and busy devices are read by the rules tried before it, the rest here
    Rule(
        "cuda_error",
        F.CUDA_ERROR,
        Kind.ROOT,
        (
            "CUDA error:",
            "CUDA driver error",
            "CUBLAS_STATUS_",
            "CUDNN_STATUS_",
            "cuDNN error",
            "CUDA_ERROR_",
            "CUDBG_EXCEPTION_",
            "Test CUDA failure",
        ),
        rx(
            r"(?:CUDA (?:driver )?error: |Test CUDA failure \S+:\d+ ')(?P<detail>[^.'\n]+)|CUBLAS_STATUS_\w+"
            r"|CUDNN_STATUS_\w+|cuDNN error|CUDA_ERROR_\w+|CUDBG_EXCEPTION_\w+"
        ),
        "cuda",
    ),
    Rule(
        "thc_cuda_error",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("error=", "cuda runtime error ("),
        rx(THC + r"(?P<detail>.+?)(?: at \S+:\d+)?\s*$"),
        "cuda",
    ),
)
"""CUDA errors other than out of memory."""
