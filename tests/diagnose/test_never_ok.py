"""Property: a log whose last line is an error, or a run whose exit status is non-zero or a signal,
is never ``ok`` -- over generated logs of healthy output in many programs' formats (Ray prefixes,
colour remnants, torchrun ranks, NCCL INFO, tqdm, loguru, Megatron, Hugging Face, DeepSpeed),
with error endings in many programs' wordings (known failures and unknown ones)."""

from __future__ import annotations

import random

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass

CASES = 150


def _healthy(rnd: random.Random) -> str:
    r, pid, step = rnd.randrange(8), rnd.randrange(1000, 99999), rnd.randrange(10_000)
    word = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9)))
    return rnd.choice(
        [
            f"\x1b[36m(WorkerDict pid={pid})\x1b[0m step {step}: loss={rnd.random():.4f} {word}={rnd.random():.3f}",
            f"[36m(FSDPPolicyWorkerBase pid={pid})[0m rank {r} step {step} memory: {rnd.uniform(10, 70):.2f}GiB",
            f"node-{r}:{pid}:{pid + 7} [{r}] NCCL INFO Channel {step % 32:02d}/0 : {r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/CUMEM/read",
            f"[rank{r}]: {word}: {rnd.randrange(100)}%|{'█' * rnd.randrange(10):<10}| {step}/20000 [00:{step % 60:02d}<01:00, 2.1it/s]",
            f"2026-03-02 10:{step % 60:02d}:11.{step % 1000:03d} | INFO     | trainer:fit:{step % 400} - {word} step={step}",
            f" iteration {step:8d}/   50000 | consumed samples: {step * 512:12d} | lm loss: {rnd.uniform(1, 4):.6E} |",
            f"{{'loss': {rnd.random():.4f}, 'grad_norm': {rnd.random():.4f}, 'learning_rate': 1e-05, 'epoch': {step / 1e4:.2f}}}",
            f"[2026-03-02 10:00:00,{step % 1000:03d}] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, skipped=0",
            f"(raylet) [{word}] {rnd.randrange(9)} workers idle",
            "",
        ]
    )


ERROR_ENDINGS = (
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "{prefix}ValueError: {word} must be positive",
    "{prefix}{Word}Error: unexpected value {n}",
    "{prefix}{Word}Exception: {word} went away",
    'Traceback (most recent call last):\n  File "/work/{word}.py", line {n}, in <module>\n    main()',
    "ERROR {word}: job step aborted",
    "FATAL: {word} stopped after {n} records",
    "Segmentation fault (core dumped)",
    "Killed",
    "{prefix}terminate called after throwing an instance of 'c10::Error'",
    "srun: error: node-{n}: task 3: Exited with exit code 2",
    "[2026-03-02 09:44:33,020] [ERROR] [launch.py:321:sigkill_handler] ['python', 'x.py'] exits with return code = 1",
    "{prefix}node-1:11:12 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node-2<4100>",
    "{prefix}*** SIGSEGV received at time=1772475493 on cpu 3 ***",
    "{word} failed: {word} not reachable",
)


def _error_ending(rnd: random.Random) -> list[str]:
    word = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 9)))
    prefix = rnd.choice(["", "[rank3]: ", "(WorkerDict pid=4411) ", "[36m(Worker pid=12)[0m "])
    text = rnd.choice(ERROR_ENDINGS).format(prefix=prefix, word=word, Word=word.capitalize(), n=rnd.randrange(1, 999))
    return text.split("\n") + [""] * rnd.randrange(3)


def _log(rnd: random.Random) -> list[str]:
    return [_healthy(rnd) for _ in range(rnd.randrange(1, 400))]


@pytest.mark.parametrize("seed", range(CASES))
def test_a_log_ending_in_an_error_is_never_ok(seed: int) -> None:
    rnd = random.Random(seed)
    lines = _log(rnd) + _error_ending(rnd)
    exit_code = rnd.choice([None, 0])
    v = classify_log(lines, exit_code=exit_code)
    assert v.failure_class is not FailureClass.OK, lines[-4:]
    assert v.evidence


@pytest.mark.parametrize("seed", range(CASES))
def test_a_failed_exit_status_is_never_ok(seed: int) -> None:
    rnd = random.Random(10_000 + seed)
    lines = _log(rnd)
    if rnd.random() < 0.5:
        v = classify_log(lines, exit_code=rnd.choice([1, 2, 3, 127, 134, 137, 139, -9]))
    else:
        v = classify_log(lines, signal_name=rnd.choice(["SIGKILL", "SIGABRT", "SIGSEGV", "SIGTERM", "9"]))
    assert v.failure_class is not FailureClass.OK
    assert v.evidence and v.evidence[0].source == "nccl-tune"


@pytest.mark.parametrize("seed", range(20))
def test_the_same_healthy_logs_with_a_clean_ending_are_ok(seed: int) -> None:
    """The generator is not what makes the two properties hold: its healthy logs are ``ok`` with a
    clean exit status, and no evidence either way (``no_end``) without one."""
    rnd = random.Random(seed)
    lines = _log(rnd)
    assert classify_log(lines, exit_code=0).ok
    assert classify_log(lines).failure_class is FailureClass.NO_END


def _ignored_exception(rnd: random.Random, cut: bool = False) -> list[str]:
    """What the interpreter prints for an exception in a finalizer (it goes on), in a random process's
    prefix; ``cut``: the log stops before its exception line."""
    prefix = rnd.choice(["", "[rank5]:", "(WorkerDict pid=4411) ", "[36m(Worker pid=12)[0m "])
    exc = rnd.choice(
        [
            "AssertionError: can only join a child process",
            "BrokenPipeError: [Errno 32] Broken pipe",
            f"RuntimeError: DataLoader worker (pid {rnd.randrange(100, 99999)}) is killed by signal: Killed.",
        ]
    )
    frames = [
        f'{prefix}  File "/usr/lib/python3.10/multiprocessing/process.py", line {rnd.randrange(1, 300)}, in join',
        f"{prefix}    res = self._popen.wait(timeout)",
    ] * rnd.randrange(0, 9)
    lines = [
        f"{prefix}Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f{rnd.randrange(16**8):08x}>"
    ]
    if frames:
        lines += [f"{prefix}Traceback (most recent call last):", *frames]
    return lines + ([] if cut else [prefix + exc])


@pytest.mark.parametrize("seed", range(40))
def test_an_ignored_exception_before_an_error_ending_does_not_make_it_ok(seed: int) -> None:
    rnd = random.Random(20_000 + seed)
    lines = _log(rnd) + _ignored_exception(rnd) + _error_ending(rnd)
    assert classify_log(lines, exit_code=rnd.choice([None, 0])).failure_class is not FailureClass.OK, lines[-6:]


@pytest.mark.parametrize("seed", range(40))
def test_healthy_logs_with_ignored_exceptions_anywhere_are_ok(seed: int) -> None:
    """Blocks between healthy lines, and one cut short at the end of the log."""
    rnd = random.Random(30_000 + seed)
    lines = _log(rnd)
    for at in sorted((rnd.randrange(len(lines) + 1) for _ in range(rnd.randrange(1, 4))), reverse=True):
        lines[at:at] = _ignored_exception(rnd)
    lines += _ignored_exception(rnd, cut=rnd.random() < 0.5)
    v = classify_log(lines, exit_code=0)
    assert v.ok, [str(e) for e in v.evidence]
    assert classify_log(lines).failure_class is FailureClass.NO_END
