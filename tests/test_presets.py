"""Every progress preset on lines in its trainer's own format (from each project's logging code and
docs), through the real log reader: colours, Ray and torchrun prefixes, progress-bar redraws; and
recognising the preset when the space names none."""

from __future__ import annotations

import io
import re
import statistics
import time

import pytest

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.launchers.logstream import LineScanner, clean_line
from nccl_tune.launchers.progress import ProgressState, ProgressTracker
from nccl_tune.presets import PRESETS
from nccl_tune.trial import ProgressRules, StopReason, TrialResult

ESC = "\x1b"


def read(rules: ProgressRules, chunks: list[str], dt: float = 2.0) -> ProgressState:
    """Feed ``chunks`` (as the pipe delivers them) through the log reader, ``dt`` seconds apart."""
    tracker = ProgressTracker(rules, start_t=0.0)
    scanner = LineScanner(tracker.feed, tracker.current_literals)
    for i, chunk in enumerate(chunks, 1):
        scanner.feed(chunk.encode(), now=i * dt)
    scanner.finish(now=(len(chunks) + 1) * dt)
    return tracker.snapshot()


def per_line(values, state: ProgressState) -> tuple:
    """``values`` (one per step) at the last step of each step line."""
    return tuple(values[end - 1] for end in state.step_line_ends)


def result_of(state: ProgressState, warmup: int = 1, samples_per_step: float | None = None) -> TrialResult:
    return TrialResult(
        number=0,
        status=FailureClass.OK,
        verdict=OK_VERDICT,
        stop_reason=StopReason.MEASURED,
        step_times_s=state.step_times_s,
        step_rates=state.step_rates,
        rate_unit=state.rate_unit,
        warmup_steps=warmup,
        samples_per_step=state.samples_per_step or samples_per_step,
    )


def loguru(module: str, line: int, message: str) -> str:
    """SkyRL's loguru record, coloured, behind Ray's prefix (as the driver's stdout shows it)."""
    return (
        f"{ESC}[36m(skyrl_entrypoint pid=51234){ESC}[0m {ESC}[32m2026-08-02 10:15:01.123{ESC}[0m | "
        f"{ESC}[1mINFO    {ESC}[0m | {ESC}[36m{module}{ESC}[0m:{ESC}[36mtrain{ESC}[0m:{ESC}[36m{line}{ESC}[0m - "
        f"{ESC}[1m{message}{ESC}[0m\n"
    )


SKYRL_TODAY = [
    loguru(
        "skyrl.train.utils.utils",
        61,
        "after init - Allocated: 13.21 GiB, Reserved: 14.00 GiB, Free: 60.12 GiB, Total: 79.19 GiB",
    ),
    loguru("skyrl.train.trainer", 342, "Started: 'step'"),
    loguru("skyrl.train.trainer", 343, "Started: 'generate'"),
    loguru("skyrl.train.trainer", 343, "Finished: 'generate', time cost: 95.12s"),
    loguru("skyrl.train.trainer", 342, "Finished: 'step', time cost: 130.40s"),
    loguru("skyrl.train.trainer", 342, "Started: 'step'"),
    loguru("skyrl.train.trainer", 342, "Finished: 'step', time cost: 120.00s"),
    loguru("skyrl.train.trainer", 601, "Training done!"),
]
SKYRL_LEGACY = [line.replace("skyrl.train.trainer", "skyrl_train.trainer") for line in SKYRL_TODAY]


@pytest.mark.parametrize("lines", [SKYRL_TODAY, SKYRL_LEGACY], ids=["skyrl.train", "skyrl_train"])
def test_skyrl_timer_lines_in_both_layouts(lines):
    s = read(PRESETS["skyrl"], lines)
    assert s.step_times_s == (130.4, 120.0) and s.phase_max_s["generate"] == 95.12
    assert s.training_done and s.memory_peak_gib[None] == 14.0 and s.memory_total_gib[None] == 79.19
    r = result_of(s, samples_per_step=1280)
    assert r.throughput == (pytest.approx(1280 / 120.0), "samples/s")


HF_BAR = (
    "\r  0%|          | 0/20 [00:00<?, ?it/s]"
    "\r  5%|▌         | 1/20 [00:02<00:40,  2.10s/it]"
    "\r 10%|█         | 2/20 [00:03<00:30,  1.65s/it]"
)
HF_LOG = "{'loss': 2.3125, 'grad_norm': 1.0625, 'learning_rate': 4.5e-05, 'epoch': 0.1}\n"
HF_END = "{'train_runtime': 31.2, 'train_samples_per_second': 20.51, 'train_steps_per_second': 0.641, 'train_loss': 2.2, 'epoch': 1.0}\n"


def test_hf_trainer_bar_redraws_are_steps_as_they_arrive():
    chunks = [
        HF_BAR,
        "\r 15%|█▌        | 3/20 [00:04<00:22,  1.31it/s]",
        "\r" + " " * 40 + "\r" + HF_LOG,
        "\r 15%|█▌        | 3/20 [00:04<00:22,  1.31it/s]",
        "\r 20%|██        | 4/20 [00:05<00:19,  1.25it/s]",
    ]
    s = read(PRESETS["hf-trainer"], chunks)
    # the bar is read before its line ends; a redraw of the same step (after the log dict) is no new step;
    # steps are timed by their arrival (2 s apart here), not by the rate the bar prints; the step
    # that waited out the log dict (6 s, three times the other) is a straggler, left out
    assert s.step_times_s == (2.0, 0.0, 2.0, 6.0) and s.step_rates == () and s.rate_unit is None
    assert result_of(s, warmup=2).throughput == (pytest.approx(0.5), "steps/s")
    assert result_of(s, warmup=2, samples_per_step=32).throughput == (pytest.approx(16.0), "samples/s")


def test_hf_trainer_log_dicts_without_a_bar_and_the_final_summary():
    lines = [
        "{'loss': 2.31, 'step': 1, 'train_samples_per_second': 201.7, 'epoch': 0.01}\n",
        "{'loss': 2.25, 'grad_norm': 0.9, 'step': 2, 'train_samples_per_second': np.float64(210.3), 'epoch': 0.02}\n",
        "{'loss': 2.2, 'step': 3, 'train_samples_per_second': 190.1, 'epoch': 0.03}\n",
        HF_END,
    ]
    s = read(PRESETS["hf-trainer"], lines)
    assert s.step_rates == (201.7, 210.3, 190.1) and s.rate_unit == "samples" and s.training_done
    assert result_of(s).throughput == (pytest.approx(200.2), "samples/s")
    plain = read(PRESETS["hf-trainer"], [HF_LOG, HF_LOG, HF_LOG], dt=3.0)  # PrinterCallback: wall clock
    assert plain.step_times_s == (3.0, 3.0, 3.0) and plain.step_rates == ()


def test_hf_trainer_with_a_real_tqdm_bar():
    from tqdm import tqdm

    out = io.StringIO()
    bar = tqdm(total=6, file=out, dynamic_ncols=True, mininterval=0)
    chunks = []
    for i in range(6):
        time.sleep(0.01)
        bar.update(1)
        if i == 2:
            bar.write(HF_LOG.strip(), file=out)
        chunks.append(out.getvalue())
        out.seek(0)
        out.truncate()
    bar.close()
    chunks.append(out.getvalue())
    s = read(PRESETS["hf-trainer"], chunks)
    assert len(s.step_times_s) == 6 and s.step_rates == ()


def hf5(logs: dict) -> str:
    """A log dict as transformers 5 writes it: floats formatted ``.4g`` (strings), the rest as they are."""
    return str({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in logs.items()}) + "\n"


def test_hf_trainer_5_prints_floats_as_strings_and_only_the_summary_ends_training():
    step_logs = [
        {
            "loss": 2.3125,
            "grad_norm": 1.0625,
            "learning_rate": 4.5e-05,
            "epoch": 0.1 * i,
            "num_input_tokens_seen": 4096 * i,
            "train_runtime": 3.0 * i,
            "train_tokens_per_second": 1365.3,
        }
        for i in (1, 2, 3)
    ]  # include_num_input_tokens_seen: speed metrics in every step's dict
    assert hf5(step_logs[0]).startswith("{'loss': '2.312', 'grad_norm': '1.062', 'learning_rate': '4.5e-05'")
    s = read(PRESETS["hf-trainer"], [hf5(logs) for logs in step_logs], dt=3.0)
    assert s.step_times_s == (3.0, 3.0, 3.0) and not s.training_done
    summary = {
        "train_runtime": 31.2,
        "train_samples_per_second": 20512.7,
        "train_steps_per_second": 0.641,
        "train_loss": 2.2,
        "epoch": 1.0,
    }
    assert "'train_samples_per_second': '2.051e+04'" in hf5(summary)
    assert read(PRESETS["hf-trainer"], [hf5(step_logs[0]), hf5(summary)]).training_done
    assert read(PRESETS["hf-trainer"], [HF_LOG, HF_END]).training_done  # 4.x
    rates = read(
        PRESETS["hf-trainer"], [hf5({"loss": 2.31, "step": i, "train_samples_per_second": 12345.6}) for i in (1, 2)]
    )
    assert rates.step_rates == (12350.0, 12350.0) and rates.rate_unit == "samples"


def test_hf_trainer_lines_behind_torchrun_prefixes_but_not_a_described_bar():
    s = read(
        ProgressRules(),
        ["[rank0]:" + hf5({"loss": 2.3125, "epoch": 0.1}), "[default0]:" + hf5({"loss": 2.25, "epoch": 0.2})],
    )
    assert s.preset == "hf-trainer" and len(s.step_times_s) == 2
    bar = read(PRESETS["hf-trainer"], ["\r[rank0]: 10%|█         | 2/20 [00:03<00:30,  1.65s/it]"])
    assert bar.step_times_s == (1.0, 1.0)  # the bar's first redraw at step 2: two steps since the launch
    # another program's bar whose description ends in "]:" (OpenRLHF's "Episode [1/1]:") is no Trainer step
    assert (
        read(PRESETS["hf-trainer"], ["\rEpisode [1/1]:  10%|█         | 2/20 [00:03<00:30,  1.65s/it]"]).step_times_s
        == ()
    )


TITAN = (
    "[rank0]:[titan] 2026-08-01 12:00:{sec:02d},234 - root - INFO - {e}[31mstep: {step:2}  {e}[32mloss: 12.25000  "
    "{e}[38;2;180;60;0mgrad_norm:  3.9215  {e}[38;2;54;234;195mmemory: {gib:5.2f}GiB(22.16%)  "
    "{e}[34mtps: {tps}  {e}[36mtflops: 71.43  {e}[35mmfu: 7.22%{e}[39m\n"
)


def test_torchtitan_metrics_lines_in_colour():
    lines = [
        TITAN.format(e=ESC, sec=1, step=1, gib=21.05, tps="1,234"),
        TITAN.format(e=ESC, sec=3, step=10, gib=21.10, tps="5,010"),
        "[rank0]:[titan] 2026-08-01 12:00:04,000 - root - INFO - validate step: 10  loss:  7.1000  memory: 30.00GiB(31.00%)  tps: 99\n",
        TITAN.format(e=ESC, sec=5, step=20, gib=21.08, tps="4,990"),
        "[rank0]:[titan] 2026-08-01 12:00:06,000 - root - INFO - Training completed\n",
    ]
    s = read(PRESETS["torchtitan"], lines)
    # a line every 10th step (and at step 1) stands for the steps since the previous line
    assert s.step_line_ends == (1, 10, 20) and len(s.step_rates) == 20
    assert per_line(s.step_rates, s) == (1234.0, 5010.0, 4990.0) and s.rate_unit == "tokens" and s.training_done
    assert per_line(s.step_times_s, s)[1:] == (pytest.approx(2.0 / 9), pytest.approx(4.0 / 10))  # log_freq apart
    assert s.memory_peak_gib[None] == 21.10 and s.memory_total_gib[None] == pytest.approx(21.08 / 0.2216, rel=1e-3)
    assert result_of(s).throughput == (pytest.approx((9 * 5010 + 10 * 4990) / 19), "tokens/s")  # step-weighted


def test_torchtitan_before_november_2024_printed_wps():
    line = (
        "[rank0]:[titan] 2024-10-01 12:00:01,234 - root - INFO - step: {step:2}  loss:  7.1234  memory: 21.05GiB(22.16%)"
        "  wps: {wps}  mfu: 7.22%\n"
    )
    s = read(PRESETS["torchtitan"], [line.format(step=10, wps="5,010"), line.format(step=20, wps="4,990")])
    assert s.step_line_ends == (10, 20) and per_line(s.step_rates, s) == (5010.0, 4990.0)
    assert s.rate_unit == "tokens" and s.memory_peak_gib[None] == 21.05


MEGATRON = (
    " [2026-08-01 12:00:01.123456] iteration {it:8d}/     100 | consumed samples:   {cs:10d} | elapsed time per "
    "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 123.4 | learning rate: 1.000000E-05 | global batch "
    "size:    64 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |\n"
)


def test_megatron_iteration_lines_and_memory_report():
    lines = [
        MEGATRON.format(it=10, cs=640, ms=1500.0),
        "[Rank 0] (after 10 iterations) memory (MB) | allocated: 12345.67 | max allocated: 23456.78 | reserved: "
        "30000.00 | max reserved: 30720.00\n",
        MEGATRON.format(it=20, cs=1280, ms=1000.0),
        MEGATRON.format(it=30, cs=1920, ms=1280.0),
        " [after training is done] datetime: 2026-08-01 12:10:00 \n",
    ]
    s = read(PRESETS["megatron"], lines)
    assert s.step_line_ends == (10, 20, 30) and per_line(s.step_times_s, s) == (1.5, 1.0, 1.28)
    assert s.samples_per_step == 64 and s.training_done
    assert s.memory_peak_gib[0] == pytest.approx(30.0)
    # the throughput Megatron prints, in its own unit; its step times are kept as printed
    assert result_of(s).throughput == (pytest.approx(123.4), "TFLOP/s/GPU")


def test_lightning_progress_bar_from_real_tqdm_and_from_its_docs():
    from tqdm import tqdm

    out = io.StringIO()
    fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"
    bar = tqdm(total=4, file=out, desc="Epoch 0", bar_format=fmt, dynamic_ncols=True, mininterval=0)
    chunks = []
    for i in range(4):
        time.sleep(0.01)
        bar.n = i + 1
        bar.set_postfix({"v_num": 0, "train_loss": 2.31}, refresh=False)
        bar.refresh()
        chunks.append(out.getvalue())
        out.seek(0)
        out.truncate()
    s = read(PRESETS["lightning"], chunks)
    assert len(s.step_times_s) == 4 and s.step_rates == ()
    docs = read(
        PRESETS["lightning"],
        [
            "\rEpoch 1:   4%|▎         | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]",
            "\rEpoch 1:   4%|▍         | 41/1095 [00:03<01:37, 10.90it/s, v_num=10]",
            "\n`Trainer.fit` stopped: `max_steps=41` reached.\n",
        ],
    )
    # the first redraw seen is step 40: 40 steps in the 2 s since the launch, then one step
    assert docs.step_line_ends == (40, 41) and docs.step_times_s[-1] == 2.0 and docs.step_rates == ()
    assert docs.training_done


def test_a_bar_that_starts_over_for_a_new_epoch_counts_on():
    bar = "\rEpoch {e}:  50%|█████     | {n}/2 [00:01<00:01,  1.00it/s, v_num=0]"
    s = read(
        PRESETS["lightning"],
        [bar.format(e=0, n=1), bar.format(e=0, n=2), bar.format(e=0, n=2), bar.format(e=1, n=1), bar.format(e=1, n=2)],
    )
    assert s.step_times_s == (2.0, 2.0, 4.0, 2.0)


def test_deepspeed_throughput_timer_today_and_in_older_releases():
    today = [
        f"[2026-08-01 12:00:0{i},123] [INFO] [timer.py:264:stop] epoch=0/micro_step={20 * i}/global_step={10 * i}, "
        f"RunningAvgSamplesPerSec=45.12, CurrSamplesPerSec={46 + i}.5, MemAllocated=3.21GB, MaxMemAllocated=7.8{i}GB\n"
        for i in (1, 2, 3)
    ]
    s = read(PRESETS["deepspeed"], today)
    assert s.step_line_ends == (10, 20, 30) and per_line(s.step_rates, s) == (47.5, 48.5, 49.5)
    assert s.rate_unit == "samples" and s.memory_peak_gib[None] == 7.83
    old = read(
        PRESETS["deepspeed"],
        [
            "worker-0: [INFO 2020-02-06 19:53:56] 0/50, SamplesPerSec=1292.6411179579866\n",
            "worker-0: [INFO 2020-02-06 19:53:56] 0/100, SamplesPerSec=1303.6726433398537\n",
        ],
    )
    assert per_line(old.step_rates, old) == (1292.6411179579866, 1303.6726433398537)


def verl_line(step: int, metrics: dict[str, str]) -> str:
    """verl's console logger: ``step:N`` then ``key:value`` joined by `` - `` (values as pprint gives
    them), behind Ray's prefix of the driver's TaskRunner."""
    return "(TaskRunner pid=2345) " + " - ".join([f"step:{step}", *(f"{k}:{v}" for k, v in metrics.items())]) + "\n"


def verl_metrics(step: int, throughput: str, reserved: str, allocated: str = "np.float64(35.2134)") -> dict[str, str]:
    return {
        "training/global_step": str(step),
        "training/epoch": "0",
        "actor/pg_loss": "np.float64(-0.0123)",
        "perf/mfu/actor": "np.float64(0.41)",
        "perf/max_memory_allocated_gb": allocated,
        "perf/max_memory_reserved_gb": reserved,
        "perf/cpu_memory_used_gb": "np.float64(210.5)",
        "timing_s/gen": "61.2345",
        "timing_s/step": "95.31234",
        "timing_per_token_ms/gen": "0.0123",
        "perf/total_num_tokens": "1234567",
        "perf/time_per_step": "95.31234",
        "perf/throughput": throughput,
    }


def test_verl_console_lines_today_and_before_july_2025():
    lines = [
        "(TaskRunner pid=2345) step:0 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.42)\n",  # val_before_train
        "(TaskRunner pid=2345) Training Progress:   0%|          | 0/3 [00:00<?, ?it/s]\n",
        verl_line(1, verl_metrics(1, "1618.9012345678", "np.float64(40.125)")),
        verl_line(2, verl_metrics(2, "1620.5", "np.float64(41.5)")),
        verl_line(3, verl_metrics(3, "1619.25", "np.float64(40.875)")),
        "(TaskRunner pid=2345) 'Final validation metrics: {\\'val-core/openai/gsm8k/reward/mean@1\\': 0.61}'\n",
    ]
    s = read(PRESETS["verl"], lines)
    assert s.step_rates == (1618.9012345678, 1620.5, 1619.25) and s.rate_unit == "tokens" and s.training_done
    assert s.memory_peak_gib[None] == 41.5  # the reserved peak, not the allocated one
    assert result_of(s).throughput == (pytest.approx(1619.875), "tokens/s")
    old = [
        verl_line(
            i,
            {
                "training/global_step": str(i),
                "perf/max_memory_allocated_gb": "35.213",
                "timing_s/step": "95.312",
                "perf/throughput": f"{1600 + i:.3f}",
            },
        )
        for i in (1, 2)
    ]
    s = read(PRESETS["verl"], old)
    assert s.step_rates == (1601.0, 1602.0) and s.memory_peak_gib[None] == 35.213


def openrlhf_line(step: int, status: dict, mark: str = "✨ ") -> str:
    """OpenRLHF's PPO trainer: ``Global step N: {status}`` through its logger, behind the Ray actor's prefix."""
    return f"(PPOTrainer pid=3456) INFO 08-13 10:15:0{step} ppo_trainer.py:547] {mark}Global step {step}: {status}\n"


def test_openrlhf_global_step_lines_with_and_without_the_step_total():
    status = {
        "policy_loss": 0.0123,
        "kl": 0.0004,
        "grad_norm": 0.87,
        "timing/make_experience": 40.25,
        "timing/ppo_train": 30.5,
        "timing/broadcast": 2.25,
        "rollout/reward_mean": 0.61,
    }
    lines = [
        openrlhf_line(i, {**status, "timing/generation": 10.0 * i, "timing/step_total": 73.0 + 10.0 * i})
        for i in (1, 2, 3)
    ]
    s = read(PRESETS["openrlhf"], lines)
    assert s.step_times_s == (83.0, 93.0, 103.0) and s.step_rates == ()
    assert result_of(s, samples_per_step=1024).throughput == (pytest.approx(1024 / 98.0), "samples/s")
    asynchronous = read(
        PRESETS["openrlhf"], [openrlhf_line(i, {**status, "timing/step_total": 50.5}, mark="") for i in (1, 2)]
    )
    assert asynchronous.step_times_s == (50.5, 50.5)
    before_march_2026 = read(PRESETS["openrlhf"], [openrlhf_line(i, status) for i in (1, 2, 3)], dt=5.0)
    assert before_march_2026.step_times_s == (5.0, 5.0, 5.0)  # wall clock


NEMO_RL_STEP = [
    "\n",
    "========================= Step {n}/100 =========================\n",
    "▶ Preparing batch...\n",
    "▶ Generating responses for batch of size 512...\n",
    "\n",
    "📊 Training Results:\n",
    "  • Loss: 0.0123\n",
    "  • Avg Reward: 0.6100\n",
    "\n",
    "⏱️  Timing:\n",
    "  • Total step time: {t:.2f}s\n",
    "  • generation: 60.12s (63.1%)\n",
    "  • policy_training: 25.00s (26.2%)\n",
    "\n",
    "🔍 Performance Metrics:\n",
    "  • Throughputs (per GPU):\n",
    "    - E2E (Samples/sec/gpu): 0.67\n",
    "    - E2E (Tokens/sec/gpu): 1234.56\n",
]


def test_nemo_rl_step_blocks():
    lines = [line.format(n=n, t=t) for n, t in ((1, 95.3), (2, 90.0), (3, 91.0)) for line in NEMO_RL_STEP]
    s = read(
        PRESETS["nemo-rl"],
        [
            *lines,
            "    • Total validation time: 20.00s\n",
            "Max number of steps has been reached, stopping training early\n",
        ],
    )
    assert s.step_times_s == (95.3, 90.0, 91.0) and s.training_done
    assert result_of(s, samples_per_step=512).throughput == (pytest.approx(512 / 90.5), "samples/s")


NANOGPT_RUN = [
    "tokens per iteration will be: 16,384\n",
    "compiling the model... (takes a ~minute)\n",
    "step 0: train loss 4.2874, val loss 4.2823\n",
    "iter 0: loss 4.2649, time 29374.24ms, mfu -100.00%\n",
    "iter 10: loss 3.1462, time 54.25ms, mfu -100.00%\n",
    "iter 20: loss 2.7315, time 53.87ms, mfu 6.88%\n",
    "step 25: train loss 2.5012, val loss 2.6120\n",
    "iter 25: loss nan, time 4120.00ms, mfu 6.10%\n",
    "iter 30: loss 2.4410, time 54.00ms, mfu 6.12%\n",
]
"""nanoGPT's lines (log_interval 10, then 5; an evaluation at iteration 25, whose iteration waits it out)."""


def test_nanogpt_iterations_and_the_evaluation_between_them():
    s = read(PRESETS["nanogpt"], NANOGPT_RUN)
    # each line stands for the iterations since the one before, at the duration it printed; the
    # evaluation's "step 25:" line is no step
    assert s.step_line_ends == (1, 11, 21, 26, 31) and s.step_times_s[0] == pytest.approx(29.37424)
    assert s.step_times_s[1:11] == pytest.approx((0.05425,) * 10) and s.step_times_s[21:26] == pytest.approx(
        (4.12,) * 5
    )
    res = result_of(s, samples_per_step=16)
    # the five iterations the evaluation's line stands for are one stall, left out
    assert res.straggler_steps == (20, 21, 22, 23, 24)
    assert res.throughput == (
        pytest.approx(16 / statistics.fmean((0.05425,) * 10 + (0.05387,) * 10 + (0.054,) * 5)),
        "samples/s",
    )


def tune_bar(step: int, loss: str, rate: str = "3.84s/it") -> str:
    """torchtune's bar after ``step`` (its description set), as tqdm redraws it."""
    return f"\r1|{step}|Loss: {loss}:  {12 * step:2d}%|█         | {step}/8 [00:{4 * step:02d}<00:27, {rate}]"


def tune_line(step: int, tps: str, reserved: str) -> str:
    """torchtune's ``StdoutLogger`` metric line (``log_peak_memory_stats``)."""
    return (
        f"Step {step} | loss:1.5 lr:2e-05 tokens_per_second_per_gpu:{tps} peak_memory_active:30.5 "
        f"peak_memory_alloc:30.5 peak_memory_reserved:{reserved} \n"
    )


TORCHTUNE_DOCS = [
    "INFO:torchtune.utils.logging:Learning rate scheduler is initialized.\n",
    "\r0|0:   0%|          | 0/25880 [00:00<?, ?it/s]",
    "\r1|52|Loss: 2.3697006702423096:   0%|▏         | 52/25880 [00:24<3:55:01,  1.83it/s]",
    "\r1|53|Loss: 2.3512034416198730:   0%|▏         | 53/25880 [00:25<3:54:11,  1.84it/s]",
    "\r1|54|Loss: 2.3498017787933350:   0%|▏         | 54/25880 [00:26<3:53:40,  1.84it/s]",
]
"""torchtune's bar as its tutorials show it (before v0.5: the loss a float; ``DiskLogger``, so no
metric line on the console)."""


def test_torchtune_bar_alone_is_timed_by_the_wall_clock():
    s = read(PRESETS["torchtune"], TORCHTUNE_DOCS, dt=0.5)
    # the bar's first redraw names no step; the first described one stands for the 52 steps before it
    assert s.step_line_ends == (52, 53, 54) and s.step_times_s[-2:] == pytest.approx((0.5, 0.5))
    assert result_of(s, warmup=52).throughput == (pytest.approx(2.0), "steps/s")
    # behind torchrun's rank prefix (tune run passes --tee on to torchrun)
    teed = read(PRESETS["torchtune"], [c.replace("\r", "\r[rank0]:") for c in TORCHTUNE_DOCS], dt=0.5)
    assert teed.step_line_ends == (52, 53, 54)


def test_torchtune_metric_lines_give_their_steps_rate_and_memory():
    tensor = "tensor({:.4f}, device='cuda:0')".format
    chunks = [
        tune_bar(1, tensor(1.70)) + tune_line(1, tensor(851.2), "38.54"),
        # the bar's redraw for the next step still shows the last one's description: no step;
        # printed without a flush, the line lands behind the bar's text
        tune_bar(1, tensor(1.70)).replace("1/8", "2/8")
        + tune_bar(2, tensor(1.61))
        + tune_line(2, tensor(2456.7), "39.09"),
        tune_bar(3, "1.5872") + tune_line(3, "2461.3398", "39.09"),
        "Step 3 | val_loss:1.52 \n",
    ]
    s = read(PRESETS["torchtune"], chunks)
    assert s.step_line_ends == (1, 2, 3) and s.step_rates == (851.2, 2456.7, 2461.3398)
    assert max(s.memory_peak_gib.values()) == 39.09
    assert result_of(s).throughput == (pytest.approx((2456.7 + 2461.3398) / 2), "tokens/s")


def test_torchtune_metric_lines_in_a_late_burst_give_only_the_step_they_name():
    """Without a flush, stdout's lines reach the pipe in bursts after the bar (stderr) moved on:
    the rate of step 1 is no rate of step 3."""
    chunks = [tune_bar(1, "1.70"), tune_bar(2, "1.61"), tune_bar(3, "1.58")]
    chunks.append("".join(tune_line(n, tps, "39.09") for n, tps in ((1, "851.2"), (2, "2456.7"), (3, "2461.3"))))
    s = read(PRESETS["torchtune"], chunks)
    assert s.step_line_ends == (1, 2, 3) and s.step_rates == (None, None, 2461.3)


def composer_block(batch: int, of: int, rate: str | None = None, reserved: str = "20.9650", key: str = "peak_") -> str:
    """Composer's console block for a batch (``time/batch`` counts the batches done before it)."""
    lines = [
        f"[batch={batch}/{of}]:",
        f"\t Train time/batch: {batch - 1}",
        f"\t Train time/batch_in_epoch: {batch - 1}",
    ]
    lines += [f"\t Train memory/{key}reserved_mem: {reserved}", "\t Train loss/train/total: 9.1875"]
    lines += [f"\t Train throughput/samples_per_sec: {rate}"] if rate else []
    return "\n".join(lines) + "\n"


def test_composer_console_blocks_by_their_batch_count_with_the_speed_monitors_rate():
    chunks = [
        composer_block(1, 100, None, "18.2620"),
        composer_block(2, 100, "149.9180", "18.9040"),
        # an evaluation's blocks are no step
        "[Eval batch=1/4] Eval on eval data\n[Eval batch=4/4] Eval on eval data:\n\t Eval metrics/eval/LanguageCrossEntropy: 9.0\n",
        composer_block(3, 100, "150.2083", "18.9250"),
    ]
    s = read(PRESETS["composer"], chunks)
    assert s.step_line_ends == (1, 2, 3) and s.step_rates == (None, 149.918, 150.2083)
    assert max(s.memory_peak_gib.values()) == pytest.approx(18.925e9 / 2**30)  # GB of 10^9 bytes
    res = result_of(s)  # the batch that waited out the evaluation is a straggler
    assert res.straggler_steps == (1,) and res.throughput == (pytest.approx(149.918), "samples/s")
    # a block every 10 batches stands for ten, behind srun's "0: ", with an older release's memory key
    old = [
        "".join(f"0: {ln}\n" for ln in composer_block(b, 300, None, "20.9650", key="").splitlines())
        for b in (1, 11, 21)
    ]
    s = read(PRESETS["composer"], old)
    assert s.step_line_ends == (1, 11, 21) and max(s.memory_peak_gib.values()) == pytest.approx(20.965e9 / 2**30)


SAMPLES: dict[str, list[str]] = {
    "skyrl": SKYRL_TODAY,
    "hf-trainer": [HF_BAR, HF_LOG, hf5({"loss": 2.3125, "epoch": 0.1}), HF_END],
    "torchtitan": [
        TITAN.format(e=ESC, sec=1, step=1, gib=1.0, tps="1,000"),
        "[rank0]:[titan] 2026-08-01 12:00:06,000 - root - INFO - Training completed\n",
    ],
    "megatron": [MEGATRON.format(it=10, cs=640, ms=1.0), " [after training is done] datetime: 2026-08-01 12:10:00 \n"],
    "lightning": [
        "\rEpoch 1:   4%|▎         | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]",
        "\n`Trainer.fit` stopped: `max_steps=41` reached.\n",
    ],
    "deepspeed": [
        "worker-0: [INFO 2020-02-06 19:53:56] 0/50, SamplesPerSec=1292.6\n",
        "[2026-08-01 12:00:01,123] [INFO] [timer.py:264:stop] epoch=0/micro_step=20/global_step=10, "
        "RunningAvgSamplesPerSec=45.12, CurrSamplesPerSec=46.5, MemAllocated=3.21GB, MaxMemAllocated=7.8GB\n",
    ],
    "verl": [
        verl_line(1, verl_metrics(1, "1618.9", "np.float64(40.125)")),
        "(TaskRunner pid=2345) 'Final validation metrics: {}'\n",
    ],
    "openrlhf": [openrlhf_line(1, {"policy_loss": 0.0123, "timing/step_total": 83.0})],
    "nanogpt": NANOGPT_RUN,
    "torchtune": [tune_bar(1, "1.7023") + tune_line(1, "851.2", "38.54"), *TORCHTUNE_DOCS],
    "composer": [composer_block(1, 8), composer_block(2, 8, "149.9180")],
    "nemo-rl": [line.format(n=1, t=95.3) for line in NEMO_RL_STEP]
    + ["Max number of steps has been reached, stopping training early\n"],
}
"""Each preset's lines (steps and end) in its trainer's current format."""


def test_every_preset_has_sample_lines():
    assert set(SAMPLES) == set(PRESETS)


@pytest.mark.parametrize("other", list(PRESETS))
@pytest.mark.parametrize("preset", list(PRESETS))
def test_no_preset_recognises_another_presets_lines(preset, other):
    """Recognition uses the step, phase and end rules: none of another preset's may match, so the
    preset is the same whatever the order in which they are tried."""
    if preset == other:
        return
    rules = PRESETS[other]
    patterns = [re.compile(p) for p in (*rules.step_end, rules.phase_start, rules.phase_end, rules.training_done) if p]
    for chunk in SAMPLES[preset]:
        for raw in chunk.replace("\r", "\n").split("\n"):
            line = clean_line(raw)
            hits = [p.pattern for p in patterns if p.search(line)]
            assert not hits, f"{other} recognises a {preset} line: {line!r} ({hits})"


@pytest.mark.parametrize(
    "preset, lines",
    [
        ("skyrl", SKYRL_TODAY),
        ("hf-trainer", [HF_BAR]),
        ("hf-trainer", [HF_LOG]),
        ("torchtitan", [TITAN.format(e=ESC, sec=1, step=1, gib=1.0, tps="1,000")]),
        ("megatron", [MEGATRON.format(it=10, cs=640, ms=1.0)]),
        ("lightning", ["\rEpoch 1:   4%|▎         | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]"]),
        ("deepspeed", ["worker-0: [INFO 2020-02-06 19:53:56] 0/50, SamplesPerSec=1292.6\n"]),
        *((preset, lines) for preset, lines in SAMPLES.items()),
    ],
)
def test_the_preset_is_recognised_from_the_output(preset, lines):
    s = read(
        ProgressRules(),
        ["loading model...\n", "Loading checkpoint shards: 100%|██| 4/4 [00:05<00:00, 1.25s/it]\n", *lines],
    )
    assert s.preset == preset and len(s.step_times_s) >= 1


def test_recognised_preset_keeps_the_spaces_own_rules():
    rules = ProgressRules(training_done=r"all finished")
    s = read(rules, [MEGATRON.format(it=10, cs=640, ms=1.0), "[after training is done]\n", "all finished\n"])
    assert s.preset == "megatron" and s.training_done
    assert not read(rules, [MEGATRON.format(it=10, cs=640, ms=1.0), "[after training is done]\n"]).training_done


def test_the_prefilter_narrows_to_the_recognised_presets_texts():
    tracker = ProgressTracker(ProgressRules())
    assert b"SamplesPerSec=" in tracker.current_literals()
    tracker.feed(1, "Started: 'step'", 1.0)
    assert tracker.snapshot().preset == "skyrl" and b"SamplesPerSec=" not in tracker.current_literals()
    assert b"', time cost: " in tracker.current_literals()
