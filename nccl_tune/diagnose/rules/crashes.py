"""A process died: schedulers, launchers and signals, DataLoader workers, builds, the Hugging Face Hub,
checkpoints, disks, segfaults, Ray, vLLM and SGLang; what a failure drags along; logged errors;
any other exception."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nccl_tune.diagnose.rules.config import validation_assertion
from nccl_tune.diagnose.rules.connect import placement_group_wait, rendezvous_reset
from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import KILLED, AdviceContext, unrecognised_crash
from nccl_tune.failure import FailureClass as F
from nccl_tune.failure import signal_from_exit

_SIGNAL_IN_TEXT = re.compile(
    r"<Signals\.(?P<a>SIG\w+): \d+>|terminated with signal (?P<b>SIG\w+)|terminated with code (?P<c>-\d+)"
    r"|non-zero exit status (?P<d>-\d+)"
)


def _exception_signal(msg: str, det: dict[str, Any]) -> None:
    m = _SIGNAL_IN_TEXT.search(msg)
    if m:
        code = m.group("c") or m.group("d")
        det["signal"] = m.group("a") or m.group("b") or signal_from_exit(int(code))


def _exit_code(msg: str, det: dict[str, Any]) -> None:
    if "exit_code" in det:
        det["exit_code"] = int(det["exit_code"])
        det["signal"] = signal_from_exit(det["exit_code"])


def _signal_named(msg: str, det: dict[str, Any]) -> None:
    det["signal"] = det.pop("signal2", None) or det.get("signal")


def _signal_number(msg: str, det: dict[str, Any]) -> None:
    num = det.pop("signum", None) or det.pop("signum2", None)
    if num:
        det["signal"] = signal_from_exit(-int(num))


def _sigkill(msg: str, det: dict[str, Any]) -> None:
    det["signal"] = "SIGKILL"


def _loader_killed(msg: str, det: dict[str, Any]) -> None:
    """A DataLoader worker killed: a SIGKILL while loading data (``pressure``: a memory-heavy phase)."""
    det["signal"] = "SIGKILL"
    det["heavy_phase"] = "load"


def _scheduler(ctx: AdviceContext) -> str:
    """Slurm ended the step or one of its tasks."""
    reason = (ctx.details.get("reason") or "").strip()
    if reason == "TIME LIMIT":
        return (
            "Slurm ended the job at its time limit (CANCELLED ... DUE TO TIME LIMIT), not a failure of the run: "
            "raise --time, or checkpoint before the limit (#SBATCH --signal) and requeue"
        )
    if reason:
        return f"Slurm cancelled the job ({reason.lower()}): `sacct -j <job>` says why; resubmit if it was the node"
    if ctx.details.get("how") == "Killed":
        return (
            "Slurm reports a task Killed (SIGKILL) with no error of its own: usually the job's memory limit (--mem); "
            "`sacct -j <job> -o State,MaxRSS,ReqMem` shows it"
        )
    return (
        "Slurm ended the step (scancel, a node failure, or another task's failure under --kill-on-bad-exit): the "
        "first task that failed is above; `sacct -j <job>` says why"
    )


def _outside_signal(ctx: AdviceContext) -> str:
    return (
        f"torchrun was sent {ctx.signal_name or 'a signal'} from outside and stopped its workers, with no error of the "
        "run's before it: a scheduler's time limit or preemption, `scancel`, `kill`, or a container or node shutting "
        "down; the scheduler's own record says which (`sacct -j <job>`, `kubectl describe pod`)"
    )


_SIGNAL_ADVICE = {
    "SIGBUS": (
        "Ended by SIGBUS with no error of its own: a write to shared memory or a memory-mapped file past its end, "
        "almost always /dev/shm full (Docker's default is 64 MB; NCCL's buffers and DataLoader workers live there): "
        "run the container with --shm-size=16g or --ipc=host (`df -h /dev/shm`), or a checkpoint file cut short while "
        "it was mapped"
    ),
    "SIGABRT": (
        "Ended by SIGABRT with no error of its own in this log: the process aborted itself, usually a C++ exception "
        "nothing caught (`terminate called after throwing ...`: the NCCL watchdog taking the process down after a "
        "collective error or timeout, a gloo enforce) or a failed assert in native code; that rank's own stderr "
        "before the abort has the reason (torchrun --tee 3, or its log file), and the other ranks' logs the first error"
    ),
}
"""Advice for a process a signal ended that says more than the signal's name (kills have their own)."""


def _signalled(ctx: AdviceContext) -> str:
    return _SIGNAL_ADVICE.get(ctx.signal_name or "") or unrecognised_crash(ctx)


def _child_exit(ctx: AdviceContext) -> str:
    """A launched process exited: by a signal that says more, else with a code of its own and no error the
    log shows."""
    if ctx.signal_name in _SIGNAL_ADVICE:
        return _SIGNAL_ADVICE[ctx.signal_name]
    code = ctx.details.get("exit_code")
    if (code or 0) <= 0:
        return unrecognised_crash(ctx)
    who = f"Rank {ctx.rank}" if ctx.rank is not None else "A worker process"
    return (
        f"{who} exited first with code {code} (its own exit, not a signal) and no error this log shows: its own "
        "output has the reason (torchrun --tee 3 or --log-dir keeps each rank's; an `error_file` in the failure "
        "summary holds its traceback when the script uses @record); the other ranks' lost connections or timeouts "
        "followed from it"
    )


def _build_mismatch(ctx: AdviceContext) -> str:
    lib = ctx.details.get("library") or "a compiled extension"
    return (
        f"{lib} was built against another torch or CUDA (undefined symbol): reinstall it against the installed torch "
        "(`pip install --no-build-isolation --force-reinstall <package>`), or pin torch to the version it was built for"
    )


def _exception_in_context(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """What an exception means given its traceback: a refused config (an ``AssertionError`` in a
    validation function), a placement group never ready (Ray's ``GetTimeoutError`` waiting for one)."""
    return validation_assertion(m, msg, before) or placement_group_wait(m, msg, before)


def _exception(ctx: AdviceContext) -> str:
    exc = ctx.details.get("exception")
    return f"The program raised {exc or 'an exception'} that is not a known infrastructure failure: read the evidence lines"


KILLED_WORDS = (
    "Killed|Getötet|Processus arrêté|Terminado \\(killed\\)|Ucciso|Убито|Убит|已杀死|強制終了|強制結束|Morto(?: \\(Killed\\))?"
    "|Dödad|Geëlimineerd|Unicestwiony|Zabit(?: \\(SIGKILL\\))?|Abgebrochen \\(Killed\\)|Tué|Matado|Süreç durduruldu"
)
"""How a shell says a command was killed by SIGKILL: ``strsignal(SIGKILL)`` in glibc's translations
(English, German, French, Spanish, Italian, Russian, Chinese, Japanese, Portuguese, Swedish, Dutch,
Polish, Czech, Turkish) and bash's own where it does not use glibc's."""
_LINE_WORD = r"(?:(?:line|Zeile|ligne|línea|riga|строка|linha|linia|regel)\s*\d+\s*:|\d+\s*行:|第\s*\d+\s*行[:：])"

KILLED_REPORT = Rule(
    "killed",
    F.CRASH,
    Kind.CRASH,
    ("Killed",),
    rx(
        rf"^\s*(?:\[\d+\][+-]?\s+)?(?:{KILLED_WORDS})(?::\s*\d+)?(?:\s{{2,}}\S.*)?\s*$"
        rf"|{_LINE_WORD}\s*\d+\s+(?:{KILLED_WORDS})(?::\s*\d+)?(?:\s|$)"
    ),
    "killed",
    details=_sigkill,
    advice=KILLED,
)
"""A shell's report of a command killed by SIGKILL: bash's job report ``script.sh: line 12:  4410
Killed   python ...`` (in German ``Zeile 12: ... Getötet``), a bare ``Killed`` (dash, on macOS
``Killed: 9``), an interactive ``[1]+  Killed   python ...``. Only the English word is a prefilter
key: the reader also tries this rule on the last lines of a log (``TAIL_RULES``), where a kill
report ends it."""

TORCHRUN_ROOT_CAUSE = Rule("torchrun_root_cause", F.CRASH, Kind.CRASH, (), None, "child_exit", advice=_child_exit)
"""torchrun's ``Root Cause (first observed failure)`` block (its rank, exit code and signal)."""

DIED: tuple[Rule, ...] = (
    # Slurm ending a step or job ("slurmstepd: error: *** STEP 12.0 ON node3 CANCELLED AT ... DUE TO TIME LIMIT ***")
    # or reporting a task it ended ("srun: error: node3: task 0: Terminated"): after the run's own error, if any
    Rule(
        "slurm_task_end",
        F.CRASH,
        Kind.SYMPTOM,
        ("error: *** JOB", "error: *** STEP", "srun: error:"),
        rx(
            r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<reason>[A-Z][A-Z ]*?))? \*\*\*"
            r"|srun: error: \S+: tasks? [\d,-]+: (?P<how>Terminated|Killed)\b"
        ),
        "scheduler",
        advice=_scheduler,
    ),
    # torchrun's agent itself sent a signal from outside ("Received 15 death signal, shutting down
    # workers" in torch 2.13, "Received Signals.SIGTERM death signal" in others, then "SignalException:
    # Process N got signal: 15"): a scheduler, a container stop, a user; after the run's own error, if
    # any (its consequence)
    Rule(
        "torchrun_signalled",
        F.CRASH,
        Kind.SYMPTOM,
        ("death signal", "SignalException: Process"),
        rx(
            r"Received (?:Signals\.)?(?:(?P<signal>SIG[A-Z0-9]+)|(?P<signum2>\d+)) death signal"
            r"|SignalException: Process \d+ got signal: (?P<signum>\d+)"
        ),
        "outside_signal",
        details=_signal_number,
        advice=_outside_signal,
    ),
    Rule(
        "torchrun_child_failed",
        F.CRASH,
        Kind.CRASH,
        ("exitcode",),
        rx(r"failed \(exitcode: (?P<exit_code>-?\d+)\) local_rank: (?P<rank>\d+)"),
        "child_exit",
        details=_exit_code,
        advice=_child_exit,
    ),
    Rule(
        "launcher_exit",
        F.CRASH,
        Kind.CRASH,
        (
            "exits with return code",
            "exited with code",
            "Exited with exit code",
            "command failed with exit code",
            "terminated with exit code",
        ),
        rx(
            r"(?:--local_rank=(?P<rank>\d+)\S*.*)?(?:exits with return code = |exited with code |Exited with exit code "
            r"|[Cc]ommand failed with exit code |command terminated with exit code )(?P<exit_code>-?[1-9]\d*)"
        ),
        "child_exit",
        details=_exit_code,
        advice=_child_exit,
    ),
    # nccl-tests relaying a failure up its calls (" .. host pid N: Test failure common.cu:N") before it exits
    Rule(
        "nccl_tests_failed",
        F.CRASH,
        Kind.CRASH,
        ("Test failure",),
        rx(r"(?:^|\s)\.\. \S+ pid \d+: Test failure \S+:\d+\s*$"),
        "nccl_tests",
    ),
    Rule(
        "signal_received",
        F.CRASH,
        Kind.CRASH,
        ("received by PID", "Received SIG"),
        rx(r"Signal (?P<signum>\d+) \((?P<signal>SIG\w+)\) received by PID|Received (?P<signal2>SIG\w+)"),
        "signal",
        details=_signal_named,
        advice=_signalled,
    ),
    # a DataLoader worker the kernel killed ("is killed by signal: Killed.": SIGKILL, host memory as a rule)
    Rule(
        "dataloader_killed",
        F.CRASH,
        Kind.CRASH,
        ("is killed by signal: Killed",),
        None,
        "killed",
        details=_loader_killed,
        advice=KILLED,
    ),
    # a DataLoader worker's SIGBUS writing to a too small /dev/shm (before segfault: its "Bus error")
    Rule(
        "dataloader_bus_error",
        F.CRASH,
        Kind.CRASH,
        ("Unexpected bus error encountered in worker", "is killed by signal: Bus error"),
        None,
        "dataloader_shm",
        advice="A DataLoader worker died of SIGBUS writing to shared memory: /dev/shm is too small (Docker's default is 64 MB): "
        "run the container with --shm-size=16g or --ipc=host, or lower num_workers",
    ),
    # a compiled extension built against another torch ("ImportError: .../flash_attn_2_cuda...so: undefined
    # symbol: _ZN3c10...")
    Rule(
        "build_mismatch",
        F.CRASH,
        Kind.CRASH,
        ("ImportError", "OSError"),
        rx(r"(?:ImportError|OSError): (?P<library>\S+?\.so[.\d]*): undefined symbol"),
        "build_mismatch",
        advice=_build_mismatch,
    ),
    # the model or tokenizer the command names could not be fetched from the Hugging Face Hub
    Rule(
        "hf_hub_unreachable",
        F.CRASH,
        Kind.CRASH,
        (
            "Error: We couldn't connect to 'https://huggingface.co'",
            "LocalEntryNotFoundError",
            "RepositoryNotFoundError",
            "GatedRepoError",
        ),
        None,
        "model_fetch",
        advice="The model or tokenizer could not be fetched from the Hugging Face Hub (no network from the node, a misspelled "
        "or gated repository): check the model path in the command, HF_TOKEN for a gated model, or download it once "
        "and run with HF_HUB_OFFLINE=1 so that every trial reads the local copy",
    ),
    # a weights or checkpoint file cut short or not what it claims (an interrupted download or copy, a write
    # that ran out of disk, a Git LFS pointer in place of the file): safetensors, torch.load, pickle
    Rule(
        "corrupt_checkpoint",
        F.CRASH,
        Kind.CRASH,
        ("SafetensorError", "PytorchStreamReader failed reading", "UnpicklingError: invalid load key"),
        None,
        "corrupt_checkpoint",
        advice="A weights or checkpoint file could not be read: it is cut short or is not the file it claims to be (an "
        "interrupted download or copy, a save that ran out of disk, a Git LFS pointer checked out in its place); delete "
        "it and fetch it again (`huggingface-cli download <repo>`, or `git lfs pull`), or resume from an earlier "
        "checkpoint; every trial reading it fails the same way",
    ),
    Rule(
        "disk_full",
        F.CRASH,
        Kind.CRASH,
        ("No space left on device",),
        None,
        "disk_full",
        exclude=("NCCL WARN", "posix_fallocate", "/dev/shm"),
        advice="The disk is full: a checkpoint or log write failed; free space or point the checkpoint and output directories "
        "at a larger volume, and keep fewer checkpoints",
    ),
    Rule(
        "segfault",
        F.CRASH,
        Kind.CRASH,
        ("Segmentation fault", "SIGSEGV", "Bus error", "SIGBUS", "Illegal instruction (core dumped)"),
        None,
        "segfault",
        # Ray's worker-death message lists a segfault among the causes it might have had
        exclude=("unexpectedly due to SIGSEGV",),
        advice="A segmentation fault in native code: note the library in the stack (NCCL, CUDA, a kernel) and rerun with "
        "CUDA_LAUNCH_BLOCKING=1",
    ),
    KILLED_REPORT,
    Rule(
        "ray_kill",
        F.CRASH,
        Kind.SYMPTOM,
        ("killed by `ray.kill`", "ray.kill"),
        rx(r"killed by `?ray\.kill"),
        "ray_kill",
    ),
    # a node of the Ray cluster died under the run (its raylet missed its heartbeats: crashed, host OOM, the
    # machine or its network gone)
    Rule(
        "ray_node_died",
        F.CRASH,
        Kind.CRASH,
        ("NodeDiedError",),
        None,
        "node_died",
        advice="A node of the Ray cluster died under the run (its raylet stopped answering: crashed, host memory, the machine "
        "or its network gone): the node's raylet log (/tmp/ray/session_latest/logs/raylet.out) and `dmesg` there say "
        "why; not a config problem unless host memory ran out",
    ),
    Rule(
        "ray_actor_died",
        F.CRASH,
        Kind.CRASH,
        (
            "ActorDiedError",
            "The actor died unexpectedly",
            "The actor is dead because",
            "RayActorError",
            "WorkerCrashedError",
            "ActorUnavailableError",
            "Worker exit type: SYSTEM_ERROR",
            "died because of an error raised in its creation task",
            "Exception raised in creation task",
        ),
        None,
        "actor_died",
        advice="A Ray actor died without a recorded cause: read the worker's own log (`ray logs`, /tmp/ray/session_latest/"
        "logs) for its first error; SIGKILL there usually means host memory",
    ),
    # a vLLM engine-core or worker process that died with no Python error of its own (killed, a segfault or an
    # abort in native code): "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    # "Worker proc VllmWorker-2 died unexpectedly, shutting down executor."; then every request fails with
    # "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause." (an
    # error before either one names the crash: ``classify`` keeps it)
    Rule(
        "vllm_proc_died",
        F.CRASH,
        Kind.CRASH,
        ("died unexpectedly, shutting down",),
        rx(r"(?P<proc>(?:Engine core|Worker) proc \S+) died unexpectedly"),
        "engine_died",
        advice="A vLLM engine-core or worker process died with no Python error of its own (killed or crashed in native "
        "code), and the engine died with it: read that process's last lines (its `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)` prefix); SIGKILL is usually host memory (`dmesg | grep -i -E 'oom|killed process'`), a "
        "segfault or abort points at a kernel, CUDA graph or NCCL (rerun with NCCL_DEBUG=WARN)",
    ),
    Rule(
        "vllm_engine_dead",
        F.CRASH,
        Kind.CRASH,
        ("EngineDeadError", "AsyncEngineDeadError"),
        None,
        "engine_dead",
        advice="The vLLM engine died earlier (EngineDeadError is every later request failing): the cause is the engine "
        "core's or its workers' first error above this line (lines prefixed `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)`, or the inference actor's log); with none, the process was killed (host memory: `dmesg`)",
    ),
    # vLLM's own stall watchdog: one engine step ran past its time limit (a tensor-parallel worker stuck,
    # often in a collective); the engine dies after it
    Rule(
        "vllm_engine_iteration_timeout",
        F.CRASH,
        Kind.CRASH,
        ("Engine iteration timed out",),
        None,
        "engine_stall",
        advice="The inference engine's step stalled past vLLM's own time limit (`Engine iteration timed out`): a hang in one "
        "of its workers, usually a tensor-parallel rank stuck in a collective; its workers' last lines or `py-spy dump` "
        "of each say which (NCCL_DEBUG=INFO for the collective)",
    ),
    # SGLang's engine refusing the trainer's weights (left partially updated), and its scheduler dying
    Rule(
        "sglang_weight_update_failed",
        F.CRASH,
        Kind.CRASH,
        ("Failed to update parameter online",),
        None,
        "weight_sync",
        advice="The inference engine refused the trainer's weights (a weight update failed and left them partially updated): "
        "the trainer's conversion does not match the engine's model (tensor or expert-parallel sharding, parameter "
        "names, the trainer's and the engine's versions)",
    ),
    Rule(
        "sglang_scheduler_exception",
        F.CRASH,
        Kind.CRASH,
        ("Scheduler hit an exception",),
        None,
        "engine",
        advice="The inference engine's scheduler died (SGLang's `Scheduler hit an exception`): the traceback after that line "
        "names the error; the rollout cannot go on without the engine",
    ),
)
"""A process died."""

DRAGGED_ALONG: tuple[Rule, ...] = (
    # a rank whose peer died or aborted under it (gloo's wording): it was waiting on that peer
    Rule(
        "peer_gone",
        F.CRASH,
        Kind.SYMPTOM,
        ("Connection reset by peer", "Connection closed by peer"),
        None,
        "peer_gone",
        in_context=rendezvous_reset,
        advice="This process's peer went away under it (connection closed or reset by peer), with no error of its own before: "
        "another rank, node or server died or aborted first, and its own log has the first error; read that rank's or "
        "node's output (`nccl-tune diagnose` on the trial folder reads every rank's log together)",
    ),
    Rule(
        "nccl_abort_teardown",
        F.CRASH,
        Kind.SYMPTOM,
        (
            "To avoid data inconsistency",
            "terminate called after throwing",
            "Fatal Python error: Aborted",
            "Aborted (core dumped)",
            "ncclCommAbort",
            "Process group watchdog thread terminated",
            "closing signal SIGTERM",
            "Exiting main process due to a failure",
            "ChildFailedError",
            "Broken pipe",
            "Killing subprocess",
        ),
        None,
        "teardown",
    ),
)
"""What a failure drags along."""

LOGGED_ERRORS: tuple[Rule, ...] = (
    Rule(
        "loguru_error",
        F.CRASH,
        Kind.SUPPORT,
        ("| ERROR", "| CRITICAL"),
        rx(r"\|\s*(?:ERROR|CRITICAL)\s*\|"),
        "logged_error",
    ),
)
"""Error lines a logger printed: the cause of a failure that follows."""

ANY_EXCEPTION: tuple[Rule, ...] = (
    Rule(
        "exception",
        F.CRASH,
        Kind.CRASH,
        ("Error", "Exception", "KeyboardInterrupt"),
        rx(
            r"(?:^|[\s\]>|(:])(?P<exception>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception|KeyboardInterrupt))"
            r"(?::\s|:?\s*$)"
        ),
        "exception",
        exclude=("Warning:",),
        details=_exception_signal,
        in_context=_exception_in_context,
        advice=_exception,
    ),
)
"""Any other exception (tried last)."""
