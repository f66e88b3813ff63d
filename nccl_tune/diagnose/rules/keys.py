"""Which lines can matter at all: the other lines the reader reads (the end of training, a program's
exit, host-memory readouts), and the prefilter every line passes first: one chain of substring
tests over the keys of every rule and of those lines, its answer cached per digit-masked template."""

from __future__ import annotations

from collections.abc import Iterable

from nccl_tune.diagnose.rules.rule import Rule, rx

TRAINING_END: tuple[str, ...] = (
    "Training done",
    "Training completed",
    "Training finished",
    "training finished",
    "Training complete",
    "'train_runtime'",
    "[after training is done]",
    "Finished training",
)
"""A trainer's own end-of-training line (SkyRL, OpenRLHF, Hugging Face Trainer, Megatron, ...): failures
after it happened after training."""

PROGRAM_EXIT: tuple[str, ...] = (
    "destroy_process_group() was not called before program exit",
    "has NOT been destroyed before it is being destructed",
    "worker group successfully finished",
    "exits successfully.",
    "Avg bus bandwidth",
)
"""Lines printed as a program exits: PyTorch's warning from a process group's destructor
(``destroy_process_group() was not called before program exit``, before 2.4 ``process group has
NOT been destroyed before it is being destructed``), a launcher reporting a clean exit (torchrun's
agent: ``[default] worker group successfully finished``, printed with ``Local worker group finished
(WorkerState.SUCCEEDED)``; DeepSpeed's launcher: ``Process N exits successfully.``), nccl-tests'
summary after its last size. With no failure in the log, each is positive evidence of an end
(``ok``)."""

CLEAN_EXIT = rx(r"\bJob '[^']+' succeeded\b|\bexited with code 0\s*$")
"""Clean exits reported in words a substring cannot tell from a failure: Ray Jobs' ``Job
'raysubmit_...' succeeded``, docker compose's ``trainer-1 exited with code 0``."""
CLEAN_EXIT_KEYS: tuple[str, ...] = ("' succeeded", "exited with code")

HOST_MEMORY_KEYS: tuple[str, ...] = (
    "CPU Virtual Memory",
    "host RAM",
    "Host RAM",
    "RAM usage",
    "RAM used",
    "host memory",
    "Host memory",
    "System memory",
    "cpu_memory_used_gb",
)
"""Host-memory readouts a trainer prints (DeepSpeed's ``see_memory_usage``, per-step RAM lines)."""

HOST_MEMORY = rx(
    r"(?:CPU Virtual Memory|[Hh]ost (?:RAM|memory)|System memory|RAM usage|RAM used)\b[^%\n]*?"
    r"(?P<pct>\d{1,3}(?:\.\d+)?)\s*%"
    r"|cpu_memory_used_gb:(?:np\.float\d+\()?(?P<gb>\d+(?:\.\d+)?)"
)
"""A host-memory readout: a share of RAM (``pct``), or the host memory used in GB (``gb``: verl's
``perf/cpu_memory_used_gb``, from ``psutil.virtual_memory().used``)."""

MEMORY_LIMIT_KEYS: tuple[str, ...] = ("memory.max", "memory.high", "memory.limit_in_bytes", "emory limit", "--memory=")
MEMORY_LIMIT = rx(
    r"memory\.(?:max|high|limit_in_bytes)\b|\b(?:cgroup|[Cc]ontainer|[Pp]od|[Jj]ob|[Ss]tep)\b[^\n]{0,40}?[Mm]emory limit"
    r"|[Mm]emory limit\b[^\n]{0,30}?\d|--memory=\d"
)
"""A memory limit the run lives under (a cgroup's ``memory.max``, a container's, pod's or job's
memory limit, ``docker run --memory=``): whatever crosses it is killed by SIGKILL, silently. Not a
device's (``MEMORY_LIMIT_NOT``)."""
MEMORY_LIMIT_NOT: tuple[str, ...] = ("GPU", "gpu", "CUDA", "cuda", "KV", "device", "exceeded")

MEMORY_HEAVY = rx(
    r"(?P<save>[Ss]aving (?:the |a |final |merged |actor |critic |hf |HF |model |full )*(?:model|checkpoint|weights"
    r"|state[ _]dict|adapter)|[Cc]heckpoint \S+ is about to be saved|save_checkpoint|save_pretrained"
    r"|saving checkpoint at iteration|[Ss]aving to \S+\.(?:pt|bin|safetensors|ckpt))"
    r"|(?P<load>Loading checkpoint shards|[Ll]oading (?:the )?(?:train(?:ing)? )?(?:dataset|data|weights|checkpoint|model)"
    r"|\bMap(?: \(num_proc=\d+\))?:|\bFilter(?: \(num_proc=\d+\))?:|Generating \w+ split|[Tt]okeniz(?:ing|e) "
    r"|Resolving data files|building (?:train|\w+ datasets)|[Ll]oading (?:doc|sample|shuffle)-idx)"
    r"|(?P<gather>[Gg]ather(?:ing)? (?:the )?(?:full |fp32 |16-?bit )?(?:state[ _]dict|weights|params|parameters)"
    r"|[Cc]onsolidat\w* (?:the )?(?:state|weights|checkpoint|model)|FULL_STATE_DICT|zero_to_fp32|fp32 state dict"
    r"|stage3_gather_16bit_weights_on_model_save|[Mm]erging (?:LoRA|lora|the adapter|adapter))"
)
"""A memory-heavy phase a trainer announces: a checkpoint saved (``save``), data or weights loaded,
a dataset mapped or tokenised (``load``), weights gathered to one rank or merged (``gather``). The
host memory these take is what the OOM killer most often ends a run in."""

_DIGITS = bytes.maketrans(b"0123456789", b"##########")


def template(line: str) -> bytes:
    """The line as bytes with every digit masked (``#``): lines that differ only in numbers (steps,
    losses, ranks, channels) share a template. No prefilter key holds a digit or ``#``, so a key
    occurs in a line exactly when it occurs in its template: the prefilter's answer can be cached
    per template."""
    return line.encode("utf-8", "surrogatepass").translate(_DIGITS)


def _build_prefilter(keys: tuple[str, ...]):
    """A function ``line -> bool`` testing ``k in line`` for every key, as one chain of ``or``s
    (several times faster than a regular expression alternation on CPython; ``str`` containment
    is also several times faster than ``bytes``)."""
    bad = [k for k in keys if any(c.isdigit() or c == "#" for c in k)]
    if bad:
        raise ValueError(f"prefilter keys must hold no digit or '#': {bad}")
    # keys that contain other keys are redundant: "CUDA error: out of memory" needs no test of its
    # own when "CUDA error:" is tested
    needed = sorted(k for k in set(keys) if not any(o != k and o in k for o in keys))
    body = " or ".join(f"{k!r} in line" for k in needed)
    namespace: dict[str, object] = {}
    exec(f"def prefilter(line):\n    return {body}\n", namespace)  # noqa: S102 - built from the rules' constant keys
    return namespace["prefilter"], tuple(needed)


OTHER_KEYS: tuple[str, ...] = (
    "Started: '",
    "Finished: '",
    *TRAINING_END,
    *PROGRAM_EXIT,
    *CLEAN_EXIT_KEYS,
    *HOST_MEMORY_KEYS,
    *MEMORY_LIMIT_KEYS,
    "Init START",
    "Root Cause",
    "Traceback (most recent call last)",
)
"""The keys of the lines the reader reads besides the rules' (progress, torchrun's summary, tracebacks)."""


def build_prefilter(rules: Iterable[Rule]):
    """``(prefilter, keys)``: ``prefilter(line) -> bool`` is True when a rule of ``rules`` or another
    line the reader reads could match the line; ``keys`` are the substrings it tests."""
    return _build_prefilter(tuple(sorted({k for r in rules for k in r.keys} | set(OTHER_KEYS))))
