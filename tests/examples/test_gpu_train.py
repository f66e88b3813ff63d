"""examples/gpu_train.py and its space on a CPU: the job's flags, its torchtitan lines as the tool's
progress reader reads them (the GPU line with its memory field too), the space as the loader and a
dry run see it, and a 2-trial study over gloo. tests/gpu runs the same job on a GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import ProgressRules
from tests.tuner.conftest import run_cli

pytestmark = pytest.mark.timeout(300)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = EXAMPLES / "gpu_train.py"
SPACE = str(EXAMPLES / "gpu_train.yaml")
JOB = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "1", str(SCRIPT)]


def _module():
    """The job as a module (its dataclasses need it registered while they are made)."""
    spec = importlib.util.spec_from_file_location("examples_gpu_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gpu_train = _module()


def read_progress(lines: list[str]):
    """What the tool's progress reader makes of ``lines`` (the preset recognised from them)."""
    tracker = ProgressTracker(ProgressRules(), start_t=0.0)
    for i, line in enumerate(lines):
        tracker.feed(i, line, float(i))
    return tracker.snapshot()


@pytest.fixture
def one_rank_group(monkeypatch):
    """The environment torchrun gives a single rank, for running the job's ``main`` in this process.
    Port 0: the rank's store binds a free port itself (a port picked here and released may be taken
    by another worker's job before the store binds it; once, the rank then waited forever in C)."""
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LOCAL_RANK", "0")
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_torchrun_runs_the_job_over_gloo_and_the_tool_reads_its_lines():
    done = subprocess.run([*JOB, "--steps", "3", "--seq-len", "64"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model tiny: ") and lines[0].endswith("1 rank(s) on cpu (gloo)")
    assert lines[-1] == "Training completed"
    state = read_progress(lines)
    assert state.preset == "torchtitan" and state.training_done
    assert len(state.step_times_s) == 3 and state.rate_unit == "tokens"
    assert all(r is not None and r > 0 for r in state.step_rates)
    assert not state.memory_peak_gib  # a CPU has no device memory: the field is left out


def test_the_gpu_line_gives_the_reader_max_memory_reserved_and_the_gpu_s_size():
    line = gpu_train.step_line(7, 10.53125, 1.09, 98304.4, 512.3, (61.27, 43.95))
    assert line == "step:  7  loss: 10.5312  grad_norm:  1.0900  memory: 61.27GiB(43.95%)  tps: 98,304  tflops: 512.30"
    state = read_progress([line, "Training completed"])
    # the first line, at step 7, stands for the 7 steps since the start
    assert state.preset == "torchtitan" and state.step_line_ends == (7,) and state.training_done
    assert state.step_rates == (98304.0,) * 7
    assert state.memory_peak_gib == {None: 61.27}
    assert state.memory_total_gib[None] == pytest.approx(61.27 / 0.4395, rel=1e-3)


def test_checkpointing_keeps_less_for_backward_and_computes_the_same_loss():
    cfg = gpu_train.MODELS["tiny"]
    tokens = torch.randint(0, cfg.vocab, (2, 65), generator=torch.Generator().manual_seed(0))
    kept, losses = {}, {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = gpu_train.Transformer(cfg, ckpt)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}

        def pack(t: torch.Tensor, saved=saved, params=params) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in params:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        kept[ckpt], losses[ckpt] = sum(saved.values()), float(loss.detach())
    assert kept[True] < kept[False] / 2
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)


def test_the_stall_flag_sleeps_inside_the_step_it_names():
    """Run by torchrun, as a trial runs it: run in the pytest worker, its one-rank gloo group waited
    in C until the suite's backstop ended the worker, in three fresh-clone runs (two of them on the
    lowest versions the requirements admit)."""
    t0 = time.monotonic()
    args = ["--steps", "3", "--seq-len", "32", "--stall-at-step", "2", "--stall-s", "1.5"]
    done = subprocess.run([*JOB, *args], capture_output=True, text=True, timeout=240)
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("step:")] == ["1", "2", "3"]
    stall = next(i for i, line in enumerate(lines) if "stalls for 1.5 s" in line)
    assert lines[stall - 1].startswith("step:  1 ") and lines[stall + 1].startswith("step:  2 ")
    assert elapsed >= 1.5


def test_the_model_flag_and_bad_sizes(one_rank_group, capsys):
    cfg = gpu_train.MODELS["1b"]
    assert 0.9e9 < cfg.parameters() < 1.0e9
    with pytest.raises(SystemExit) as exc:
        gpu_train.parse_args(["--micro-batch-size", "0"])
    assert exc.value.code == 2
    assert "--micro-batch-size must be at least 1, not 0" in capsys.readouterr().err


def test_the_space_loads_and_a_dry_run_spells_the_flags(tmp_path):
    space = load_space(SPACE)
    assert space.names == (
        "micro_batch_size",
        "seq_len",
        "activation_checkpointing",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
    )
    assert space.progress.preset == "torchtitan"
    memory = {p.name: p.memory.value for p in space.parameters}
    assert memory["micro_batch_size"] == memory["seq_len"] == "increasing"
    assert memory["activation_checkpointing"] == "decreasing" and memory["NCCL_BUFFSIZE"] == "small"
    proc = run_cli(
        ["run", "--space", SPACE, "--set", "activation_checkpointing=true", "--dry-run", "--json", "--", *JOB],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["argv"][len(JOB) :] == ["--micro-batch-size", "2", "--seq-len", "1024", "--activation-checkpointing"]
    # the space tunes NCCL variables: the trial asks NCCL to report what it read
    assert plan["env"]["NCCL_DEBUG"] == "INFO" and "ENV" in plan["env"]["NCCL_DEBUG_SUBSYS"].split(",")


def test_a_two_trial_study_on_gloo(tmp_path):
    proc = run_cli(
        [
            "run",
            "--space",
            SPACE,
            "--set",
            "seq_len=512",
            "--trials",
            "2",
            "--confirm",
            "0",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--nccl-check",
            "off",
            "--seed",
            "0",
            "--json",
            "--",
            *JOB,
        ],
        cwd=tmp_path,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["trials"]
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    for path in sorted(tmp_path.glob("results/*/trial-000[01]/result.json")):
        result = json.loads(path.read_text())
        assert result["progress_preset"] == "torchtitan" and result["throughput_unit"] == "tokens/s"
        assert result["throughput_per_s"] > 0 and result["memory"]["source"] == "rss"
        assert result["nccl_env_seen"] == {}  # gloo: no NCCL read the trial's variables
        args = json.loads((path.parent / "spec.json").read_text())["argv"][len(JOB) :]
        assert args[args.index("--seq-len") + 1] == "512"  # pinned with --set
    assert rows[0]["params"] != rows[1]["params"]
