"""The twin program for real: processes, a gloo group, timeouts, signals and Flight Recorder
dumps, recognised from the outside the way the tuner sees them."""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import time

import psutil
import pytest

from nccl_tune.presets import SKYRL
from twin import evaluate, parse_overrides, skyrl_sql_overrides

from .conftest import SCRIPT, SHORT, clean

RULES = SKYRL  # the rules the built-in SkyRL spaces run with


def _first_match(patterns: tuple[str, ...], line: str) -> re.Match | None:
    """The match of the first of a rule's alternatives that matches ``line``."""
    return next((m for rx in patterns if (m := re.search(rx, line))), None)


def test_healthy_run_prints_what_the_tuner_parses(run_twin, tmp_path):
    # The script sets micro_train_batch_size_per_gpu=1; the later value wins, as with OmegaConf.
    run = run_twin(*SHORT, "trainer.micro_train_batch_size_per_gpu=2", env={"SIM_SEED": "3"})
    assert run.returncode == 0, "\n".join(run.lines[-30:])
    steps = [m for ln in run.lines if (m := re.search(RULES.step_end[0], ln))]
    assert len(steps) == 2
    starts = [m.group("phase") for ln in run.lines if (m := re.search(RULES.phase_start, ln))]
    assert starts[:3] == ["init_weight_sync_state", "load_checkpoints", "sync_weights"]
    step_phases = starts[starts.index("step") + 1 : starts.index("step", starts.index("step") + 1)]
    assert step_phases == [
        "generate",
        "postprocess_generator_output",
        "convert_to_training_input",
        "fwd_logprobs_values_reward",
        "compute_advantages_and_returns",
        "dump_data_batch",
        "train_critic_and_policy",
        "policy_train",
        "sync_weights",
    ]
    assert run.grep("Training done!") and run.index("Training done!") > run.index("Finished: 'step'")
    # Today's SkyRL: the workers' and engines' output goes to {trainer.log_path}/infra-YYMMDD_HHMMSS.log,
    # named on stdout; the trainer loop stays on stdout.
    logs = list((tmp_path / "logs").glob("infra-*.log"))
    assert len(logs) == 1 and re.fullmatch(r"infra-\d{6}_\d{6}\.log", logs[0].name)
    assert run.grep(f"Infrastructure logs will be written to: {logs[0]}")
    assert not run.grep("peak memory") and not run.grep("INFO vllm")
    # One memory line per modelled GPU per step, from the rank that hosts it, in the infra log.
    mems = [m for ln in run.infra_lines if "peak memory" in ln and (m := _first_match(RULES.memory, ln))]
    assert sorted(int(m.group("rank")) for m in mems) == sorted(list(range(8)) * 2)
    assert all(0 < float(m.group("gib")) < 79.15 and m.group("pct") for m in mems)
    assert any("skyrl.backends.skyrl_train.workers.fsdp.fsdp_worker" in ln for ln in run.infra_lines)
    assert run.grep("skyrl.train.trainer:train") and not run.grep("skyrl_train.trainer")
    # The console logger prints the metrics dict per step, with measured timings.
    assert len(run.grep("Step 1: ")) == 1 and any("'timing/step'" in ln for ln in run.lines)
    assert any("'generate/max_num_tokens'" in ln for ln in run.lines)  # SkyRL's rollout metrics
    # The printed step time is measured and tracks the model's scaled step time.
    cfg = parse_overrides(
        [*skyrl_sql_overrides(str(tmp_path / "home")), *SHORT, "trainer.micro_train_batch_size_per_gpu=2"],
        {"HOME": "/h"},
    )
    out = evaluate(cfg, seed=3, steps=2)
    for printed, modelled in zip((float(m.group("seconds")) for m in steps), out.step_times_s):
        assert 0.8 * modelled * cfg.env.time_scale <= printed <= modelled * cfg.env.time_scale + 1.5


def test_the_legacy_layout_prints_worker_lines_behind_ray_prefixes(run_twin):
    run = run_twin(*SHORT, env={"SIM_SEED": "3"}, legacy=True)
    assert run.returncode == 0, "\n".join(run.lines[-30:])
    assert not run.infra_lines and not run.grep("Infrastructure logs")
    assert run.grep("skyrl_train.trainer:train") and run.grep("Number of sequences: 1280")
    assert not run.grep("Reached max_training_steps")
    mems = [m for ln in run.lines if "peak memory" in ln and (m := _first_match(RULES.memory, ln))]
    assert sorted(int(m.group("rank")) for m in mems) == sorted(list(range(8)) * 2)
    # Worker lines come from the trainer ranks' own processes, trainer lines from the driver.
    worker_pids = {pid for actor, pid, _ in run.actor_lines("peak memory")}
    driver_pids = {pid for actor, pid, _ in run.actor_lines("Finished: 'step'")}
    assert len(worker_pids) == 2 and len(driver_pids) == 1 and not worker_pids & driver_pids


def test_max_training_steps_ends_the_loop_and_the_safety_net_saves(run_twin, tmp_path):
    run = run_twin(
        "trainer.max_training_steps=1",
        "trainer.eval_before_train=false",
        "trainer.eval_interval=5",
        "trainer.hf_save_interval=-1",
        env={"SIM_SEED": "3"},
    )
    assert run.returncode == 0, "\n".join(run.lines[-30:])
    assert len(run.grep("Finished: 'step'")) == 1
    reached = run.index("Reached max_training_steps=1, stopping early.")
    # eval runs on the last step (eval_interval > 0), then the final checkpoint (ckpt_interval=60 > 0).
    assert run.index("Finished: 'eval'") < reached < run.index("Saved final checkpoint.") < run.index("Training done!")


def test_oom_in_the_infra_log_leaves_stdout_with_rays_error(run_twin, tmp_path):
    # SIM_SEED=1 makes rank 0 abort in its collective: Ray reports that actor's death first.
    run = run_twin(*SHORT, env={"SIM_SEED": "1", "SIM_FAULT": "oom:1:2", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "600"})
    assert run.returncode == 1
    assert run.grep("ray.exceptions.ActorDiedError") and not run.grep("CUDA out of memory")
    assert [ln for ln in run.infra_lines if "torch.OutOfMemoryError: CUDA out of memory" in ln]
    # the fault handler's two writes ("Fatal Python error: ", "Aborted"), another rank's line may fall between
    assert any("Fatal Python error: " in ln for ln in run.infra_lines) and any(
        "Aborted" in ln for ln in run.infra_lines
    )


def test_oom_on_one_rank_cascades_into_timeouts_and_dumps_from_every_rank(run_twin, tmp_path):
    run = run_twin(
        *SHORT,
        env={
            "SIM_SEED": "1",
            "SIM_FAULT": "oom:1:2",
            "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "600",
            "SKYRL_DUMP_INFRA_LOG_TO_STDOUT": "1",
        },
    )
    assert run.returncode == 1
    oom = run.actor_lines("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert len(oom) == 1 and "GPU 1 has a total capacity of 79.15 GiB" in oom[0][2]
    timeout = run.index("Timed out waiting")
    assert run.index("torch.OutOfMemoryError") < timeout, "the root cause is printed before the cascade"
    assert run.grep("Started: 'policy_train'") and len([ln for ln in run.grep("Finished: 'step'")]) == 1
    # The other rank tears itself down with SIGABRT (SIM_SEED=1 draws an abort), as PyTorch does. Python's
    # fault handler writes "Fatal Python error: " and "Aborted" in two writes to the shared output, and the
    # OOM rank's Flight Recorder line (its dump was asked for just before the abort) may fall between them.
    assert run.grep("terminate called after throwing an instance of 'c10::DistBackendError'")
    assert run.grep("Fatal Python error: ") and run.grep("Aborted")
    assert any("killed by signal 6" in ln for ln in run.grep("A worker died or was killed"))  # SIGABRT
    assert run.grep("ray.exceptions.ActorDiedError") or run.grep("ray.exceptions.RayTaskError")
    # Every rank dumped its Flight Recorder trace; the OOM rank's is one collective behind.
    dumps = {r: pickle.loads((tmp_path / "fr" / f"nccl_trace_rank_{r}").read_bytes()) for r in (0, 1)}
    last = {r: d["pg_status"]["0"]["last_enqueued_collective"] for r, d in dumps.items()}
    assert last[1] < last[0]
    assert all(d["entries"] and d["entries"][-1]["profiling_name"].startswith("gloo:") for d in dumps.values())


def test_model_oom_names_the_gpu_the_model_predicts(run_twin, tmp_path):
    over = (*SHORT, "trainer.micro_train_batch_size_per_gpu=8")
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), *over], {"HOME": "/h"})
    failure = evaluate(cfg, seed=5, steps=2).failure
    assert failure is not None and failure.kind == "oom"
    run = run_twin(*over, env={"SIM_SEED": "5", "SIM_RANKS": "2", "SKYRL_DUMP_INFRA_LOG_TO_STDOUT": "1"})
    assert run.returncode == 1
    oom = run.grep("torch.OutOfMemoryError: CUDA out of memory")
    assert len(oom) == 1 and f"GPU {failure.rank} has a total capacity" in oom[0]


def test_crash_makes_the_peer_fail_at_once(run_twin):
    run = run_twin(
        *SHORT,
        env={
            "SIM_SEED": "4",
            "SIM_FAULT": "crash:1:1",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
            "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "100000",
            "SKYRL_DUMP_INFRA_LOG_TO_STDOUT": "1",
        },
    )
    assert run.returncode == 1
    assert run.grep("Fatal Python error: Segmentation fault")
    assert any("killed by signal 11" in ln for ln in run.grep("A worker died or was killed"))  # SIGSEGV
    assert run.grep("Connection closed by peer") or run.grep("Connection reset by peer")
    # Error handling off: the surviving rank raises instead of aborting, and nothing waits for a timeout.
    assert not run.grep("Fatal Python error: Aborted")
    assert run.wall_s < 60


def test_hang_stalls_without_output_until_the_group_is_killed(twin_env, marker, tmp_path):
    env = {**twin_env, "SIM_SEED": "2", "SIM_FAULT": "hang:0:1", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "100000"}
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), f"trainer.log_path={tmp_path}", *SHORT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            raw = proc.stdout.readline()
            if not raw:
                break
            lines.append(clean(raw.decode("utf-8", "replace").rstrip("\n")))
            if "Started: 'policy_train'" in lines[-1]:
                break
        assert "Started: 'policy_train'" in lines[-1], lines[-20:]
        os.set_blocking(proc.stdout.fileno(), False)
        time.sleep(4.0)  # the ranks' gloo timeout at this scale is 600 s; a healthy phase ends in < 1.5 s
        late = proc.stdout.read() or b""
        assert proc.poll() is None
        assert b"Finished: 'policy_train'" not in late
    finally:
        group = [p for p in psutil.process_iter() if _has_marker(p, marker)]
        os.killpg(proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(group, timeout=10)
        assert not alive, f"left after SIGTERM to the group: {[p.pid for p in alive]}"
        proc.wait(timeout=10)


def _has_marker(p: psutil.Process, marker: str) -> bool:
    try:
        return p.environ().get("NCCL_TUNE_TRIAL") == marker
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_orphan_escapes_the_group_and_ignores_sigterm(run_twin, marker):
    run = run_twin("trainer.epochs=0", env={"SIM_FAULT": "orphan"})
    assert run.returncode == 0
    orphans = [p for p in psutil.process_iter() if _has_marker(p, marker)]
    assert len(orphans) == 1
    orphan = orphans[0]
    assert os.getsid(orphan.pid) == orphan.pid
    orphan.terminate()
    time.sleep(0.5)
    assert orphan.is_running() and orphan.status() != psutil.STATUS_ZOMBIE
    orphan.kill()
    orphan.wait(timeout=5)


@pytest.mark.parametrize(
    "args, env, legacy, expected",
    [
        (("trainer.foo=1",), {}, True, ["Could not override 'trainer.foo'.", "Key 'foo' is not in struct"]),
        (("trainer.foo=1",), {}, False, ["ValueError: Invalid fields {'foo'} for TrainerConfig. Valid fields are {"]),
        (
            ("generator.num_inference_engines=2",),
            {},
            False,
            ["ValueError: Invalid fields {'num_inference_engines'} for GeneratorConfig."],
        ),
        (
            ("+trainer.foo=1",),
            {},
            False,
            ["ValueError: The '+' prefix for adding new config fields is not supported: '+trainer.foo=1'."],
        ),
        (
            ("generator.inference_engine.num_engines=2",),
            {},
            True,
            ["Could not override 'generator.inference_engine.num_engines'."],
        ),
        (
            ("trainer.train_batch_size=384",),
            {},
            False,
            ["AssertionError: train_batch_size 384 should be divisible by policy_mini_batch_size 256"],
        ),
        (
            ("trainer.max_prompt_length=30000",),
            {},
            True,
            ["AssertionError: generator.max_input_length should be set greater than or equal"],
        ),
        (
            (),
            {"NCCL_PROTO": "LL129", "SKYRL_DUMP_INFRA_LOG_TO_STDOUT": "1"},
            False,
            ['NCCL WARN Unrecognized element token "LL129" when parsing "LL129"', "invalid usage"],
        ),
    ],
    ids=[
        "unknown-key-legacy",
        "unknown-key",
        "legacy-key-today",
        "plus-today",
        "today-key-legacy",
        "batch-relation",
        "prompt-length",
        "nccl-value",
    ],
)
def test_refusals_exit_1_with_the_stack_s_message(run_twin, args, env, legacy, expected):
    run = run_twin(*SHORT, *args, env=env, legacy=legacy)
    assert run.returncode == 1
    for text in expected:
        assert run.grep(text), f"{text!r} not in:\n" + "\n".join(run.lines[-15:])
    assert not run.grep("Started: 'step'")
