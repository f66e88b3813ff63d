"""A silent SIGKILL has a cause: host memory when the log shows it (readouts at a peak or climbing, a
memory limit, a memory-heavy phase right before the kill), else a kill from outside whose advice
names where it is recorded; a shell's kill report is read in other locales too."""

from __future__ import annotations

import pytest

from nccl_tune.diagnose.pressure import HEAVY_PHASE_LINES, HostMemory, heavy_phase
from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import Evidence
from nccl_tune.failure import FailureClass as F

STEPS = [
    f" [2026-01-24 08:0{i}:00] iteration {i * 100:8d}/   20000 | consumed samples: {i * 25600:12d} | elapsed time per iteration (ms): 1840.2 | lm loss: 3.1E+00 |\n"
    for i in range(1, 6)
]
TORCHRUN_KILL = "E0123 02:44:20.117000 2211 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 3 (pid: 2241) of binary: /usr/bin/python3\n"


def _ev(no: int) -> Evidence:
    return Evidence(no, f"line {no}", "x.log")


@pytest.mark.parametrize(
    "report",
    [
        "Killed",
        "run.sh: line 7: 4410 Killed                  python train.py",
        "run.sh: Zeile 7: 4410 Getötet                 python train.py",
        "Getötet",
        "run.sh : ligne 7 : 4410 Processus arrêté        python train.py",
        "Processus arrêté",
        "run.sh: línea 7: 4410 Terminado (killed)      python train.py",
        "run.sh: riga 7: 4410 Ucciso                  python train.py",
        "run.sh: строка 7: 4410 Убито                   python train.py",
        "run.sh: 第 7 行：4410 已杀死                  python train.py",
        "[1]+  Killed                  python train.py",
        "Killed: 9",
    ],
)
def test_a_shell_kill_report_in_any_locale_is_a_sigkill(report: str) -> None:
    quiet = classify_log([*STEPS, report + "\n"])
    assert quiet.failure_class is F.CRASH and quiet.cause.details.get("signal") == "SIGKILL", quiet
    assert "from outside" in quiet.advice and "dmesg" in quiet.advice and "sacct" in quiet.advice
    saving = classify_log([*STEPS, "saving checkpoint at iteration     500 to /ckpt in torch format\n", report + "\n"])
    assert saving.failure_class is F.HOST_OOM and saving.cause.subtype == "sigkill_in_heavy_phase"
    assert saving.evidence[0].text.startswith("saving checkpoint") and "saving a checkpoint" in saving.advice


def test_a_word_that_only_contains_killed_is_no_kill_report() -> None:
    v = classify_log([*STEPS, "Killed process count: 0 (healthy)\n", "Morton order applied\n"])
    assert v.failure_class is F.NO_END


def test_a_step_after_the_heavy_phase_means_the_kill_came_later() -> None:
    lines = [
        *STEPS[:2],
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:09<00:00,  2.31s/it]\n",
        *STEPS[2:],
        TORCHRUN_KILL,
    ]
    v = classify_log(lines)
    assert v.failure_class is F.CRASH and v.rank == 3


def test_the_heavy_phase_must_be_among_the_last_lines_before_the_kill() -> None:
    far = [
        "Map (num_proc=8):  50%|█████     | 5/10 [00:01<00:01, 4.1 examples/s]\n",
        *[f"rank 0 waiting for peers ({i})\n" for i in range(HEAVY_PHASE_LINES + 1)],
    ]
    assert classify_log([*STEPS, *far, TORCHRUN_KILL]).failure_class is F.CRASH
    near = far[:1] + far[-HEAVY_PHASE_LINES + 1 :]
    assert classify_log([*STEPS, *near, TORCHRUN_KILL]).failure_class is F.HOST_OOM


def test_launchers_teardown_lines_between_the_phase_and_the_kill_are_not_counted() -> None:
    teardown = [
        f"W0123 02:44:19.002000 2211 torch/distributed/elastic/multiprocessing/api.py:897] Sending process {p} closing signal SIGTERM\n"
        for p in range(2230, 2230 + 2 * HEAVY_PHASE_LINES)
    ]
    lines = [
        *STEPS,
        "[INFO|trainer.py:3801] 2026-01-20 19:43:51,553 >> Saving model checkpoint to /out/checkpoint-500\n",
        *teardown,
        TORCHRUN_KILL,
    ]
    v = classify_log(lines)
    assert v.failure_class is F.HOST_OOM and v.rank == 3


def test_a_memory_limit_line_and_not_a_gpu_one() -> None:
    limit = "container memory limit: 64.00 GiB (cgroup v2 memory.max)\n"
    assert classify_log([limit, *STEPS, "Killed\n"]).cause.subtype == "sigkill_under_limit"
    gpu = "GPU memory limit for the KV cache: 60.1 GiB\n"
    assert classify_log([gpu, *STEPS, "Killed\n"]).failure_class is F.CRASH


def test_an_exception_of_the_killed_process_before_the_kill_is_the_crash() -> None:
    lines = [
        *STEPS,
        "[rank3]: ValueError: could not broadcast input array from shape (3,) into shape (4,)\n",
        TORCHRUN_KILL,
    ]
    v = classify_log(lines)
    assert v.failure_class is F.CRASH and "ValueError" in v.evidence[0].text and "from outside" not in v.advice


def test_peers_losing_the_killed_rank_are_its_consequence_even_printed_first() -> None:
    peer = (
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        "1970, remote process exited or there was a network error, NCCL version 2.21.5\n"
    )
    quiet = classify_log([*STEPS, peer, TORCHRUN_KILL])
    assert quiet.failure_class is F.CRASH and quiet.rank == 3  # not rank 0's nccl_error
    saving = classify_log(
        [*STEPS, "saving checkpoint at iteration     500 to /ckpt in torch format\n", peer, TORCHRUN_KILL]
    )
    assert saving.failure_class is F.HOST_OOM and saving.rank == 3


def test_the_launcher_s_sigkill_status_with_a_heavy_phase_at_the_end_is_host_oom() -> None:
    """The trial path: no kill line in the log, the exit status says SIGKILL."""
    saving = classify_log([*STEPS, "Saving model checkpoint to /out/checkpoint-500\n"], signal_name="SIGKILL")
    assert saving.failure_class is F.HOST_OOM and saving.cause.subtype == "sigkill_in_heavy_phase"
    quiet = classify_log(STEPS, signal_name="SIGKILL")
    assert quiet.failure_class is F.CRASH and "from outside" in quiet.advice


def test_host_memory_climbing_needs_readouts_that_never_fall_and_rise_enough() -> None:
    mem = HostMemory()
    for i, gb in enumerate((100.0, 104.0, 118.0, 131.0)):
        mem.readout(f"step:{i} - perf/cpu_memory_used_gb:{gb} - perf/throughput:1.0", _ev(i))
    assert mem.climb is not None and mem.climb.line_no == 3
    mem.readout("step:9 - perf/cpu_memory_used_gb:120.0 - perf/throughput:1.0", _ev(9))
    assert mem.climb is None  # fell
    flat = HostMemory()
    for i, gb in enumerate((100.0, 101.0, 102.0, 103.0)):
        flat.readout(f"perf/cpu_memory_used_gb:{gb}", _ev(i))
    assert flat.climb is None  # not enough
    shares = HostMemory()
    for i, pct in enumerate((40, 55, 70)):
        shares.readout(f"host RAM used {pct}.0%", _ev(i))
    assert shares.climb is None  # climbing, but far from full
    shares.readout("host RAM used 81.0%", _ev(5))
    assert shares.climb is not None and shares.peak is not None and shares.peak[0] == pytest.approx(0.81)
    assert not HostMemory().readout("GPU memory: 70%", _ev(1))


def test_heavy_phase_reads_the_kind_and_stops_at_a_step() -> None:
    def is_step(msg: str) -> bool:
        return msg.startswith("step")

    lines = [(1, "step 1"), (2, "Merging LoRA weights into the base model"), (3, "")]
    kind, where = heavy_phase(lines, "x.log", is_step)
    assert kind == "gather" and where.line_no == 2
    assert heavy_phase([*lines, (4, "step 2")], "x.log", is_step) is None
