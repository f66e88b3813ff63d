"""Every bad input to `nccl-tune run` gets one line naming what to fix, exit code 1, and no trial."""

from __future__ import annotations

import re
import sys

import pytest

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

GOOD = [sys.executable, str(TINY_TRAINER)]
TINY = TINY_SPACE.read_text()
SPACES = {
    "broken.yaml": "name: x\nparameters: [\n",
    "unknown_kind.yaml": TINY.replace("kind: pow2", "kind: log"),
    "bad_constraint.yaml": TINY + "\nconstraints:\n  - expr: trainer.mikro < 8\n    message: m\n",
    "huge_power.yaml": TINY + "\nconstraints:\n  - expr: 2 ** 2 ** 40 > trainer.micro\n    message: m\n",
    "huge_product.yaml": TINY.replace(
        "samples_per_step: 8 * trainer.micro", "samples_per_step: (2 ** 200) * (2 ** 100)"
    ),
    "env_path.yaml": TINY.replace("name: NCCL_ALGO", "name: PATH"),
    "env_preload.yaml": TINY.replace("name: NCCL_ALGO", "name: LD_PRELOAD"),
    "env_marker.yaml": TINY.replace("PYTHONUNBUFFERED: 1", "NCCL_TUNE_TRIAL: x"),
    "env_pythonpath.yaml": TINY.replace("PYTHONUNBUFFERED: 1", "PYTHONPATH: /tmp"),
    "env_invalid.yaml": TINY.replace("name: NCCL_ALGO", "name: NCCL-ALGO\n    target: env"),
    "env_dotted.yaml": TINY.replace("name: NCCL_ALGO", "name: nccl.algo\n    target: env"),
}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run"], "no command after --"),
        (["run", "--", "no-such-trainer-cmd", "x=1"], "command 'no-such-trainer-cmd' not found"),
        (["run", "--", "bash", "missing_script.sh"], "bash cannot run 'missing_script.sh': no such file"),
        (["run", "--space", "nope", "--", *GOOD], "unknown search space 'nope'"),
        (["run", "--space", "broken.yaml", "--", *GOOD], "YAML syntax error"),
        (["run", "--space", "unknown_kind.yaml", "--", *GOOD], "unknown kind 'log'"),
        (["run", "--space", "bad_constraint.yaml", "--", *GOOD], "names 'trainer.mikro'"),
        (
            ["run", "--space", str(TINY_SPACE), "--set", "trainer.foo=1", "--", *GOOD],
            "has no parameter or context value trainer.foo",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--set", "trainer.micro=3", "--", *GOOD],
            "'3' is not a value of trainer.micro",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--storage", "sqlite:////proc/no/such/dir/x.db", "--", *GOOD],
            "storage sqlite:////proc/no/such/dir/x.db",
        ),
        (["run", "--space", str(TINY_SPACE), "--storage", "notaurl", "--", *GOOD], "storage notaurl: cannot open it"),
        (
            ["run", "--space", str(TINY_SPACE), "--ray-address", "127.0.0.1:6379", "--", *GOOD],
            "--ray-address is for --launcher ray",
        ),
        (["run", "--space", str(TINY_SPACE), "--parallel", "4", "--", *GOOD], "--parallel 4"),
        (["run", "--space", str(TINY_SPACE), "--budget", "soon", "--", *GOOD], "--budget 'soon'"),
        (["run", "--space", str(TINY_SPACE), "--steps", "0", "--", *GOOD], "--steps 0: must be at least 1"),
        (["run", "--space", str(TINY_SPACE), "--budget", "0", "--", *GOOD], "--budget 0s: must be more than 0"),
        (
            ["run", "--space", str(TINY_SPACE), "--stall-timeout", "0", "--", *GOOD],
            "--stall-timeout 0s: must be more than 0",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--startup-timeout", "0m", "--", *GOOD],
            "--startup-timeout 0s: must be more than 0",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--trial-timeout", "0", "--", *GOOD],
            "--trial-timeout 0s: must be more than 0",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--gate-timeout", "0", "--", *GOOD],
            "--gate-timeout 0s: must be more than 0",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--warmup-steps", "-1", "--", *GOOD],
            "--warmup-steps -1: must be 0 or more",
        ),
        (
            ["run", "--space", str(TINY_SPACE), "--seed", "-1", "--", *GOOD],
            "--seed -1: must be between 0 and 4294967295",
        ),
        (["run", "--space", str(TINY_SPACE), "--seed", str(2**32), "--", *GOOD], "--seed 4294967296: must be between"),
        (["run", "--space", str(TINY_SPACE), "--trials", "0", "--", *GOOD], "--trials 0: must be at least 1"),
        (
            ["run", "--space", str(TINY_SPACE), "--nccl-check", "maybe", "--", *GOOD],
            "--nccl-check 'maybe' is unknown; use auto, on or off",
        ),
        # usage errors of the parser: one line, exit 1 (2 means "no stable config")
        (["run", "--steps", "x", "--", *GOOD], "nccl-tune run: Invalid value for '--steps'"),
        (["run", "--no-such-option", "--", *GOOD], "No such option: --no-such-option"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (["apply"], "Missing argument"),
        # --dry-run is a flag: a value after it is not taken for the training command
        (["run", "--dry-run", "true"], "'true' comes before --: put the training command after --"),
        (["run", "--json", "yes", "--", *GOOD], "'yes' comes before --"),
        (["run", *GOOD], "comes before --"),
        (["run", "--dry-run", "--space", "huge_power.yaml", "--", *GOOD], "2 ** 1099511627776 exceeds 2**256"),
        (["run", "--dry-run", "--space", "huge_product.yaml", "--", *GOOD], "the result reaches 2**256"),
        (["run", "--dry-run", "--space", "env_path.yaml", "--", *GOOD], "(PATH): a space may not set PATH"),
        (["run", "--dry-run", "--space", "env_preload.yaml", "--", *GOOD], "a space may not set LD_PRELOAD"),
        (
            ["run", "--dry-run", "--space", "env_marker.yaml", "--", *GOOD],
            "trial.env.NCCL_TUNE_TRIAL: a space may not set",
        ),
        (["run", "--dry-run", "--space", "env_pythonpath.yaml", "--", *GOOD], "a space may not set PYTHONPATH"),
        (
            ["run", "--dry-run", "--space", "env_invalid.yaml", "--", *GOOD],
            "'NCCL-ALGO' is not a valid environment variable name",
        ),
        (
            ["run", "--dry-run", "--space", "env_dotted.yaml", "--", *GOOD],
            "'nccl.algo' is not a valid environment variable name",
        ),
        (["export", "--study", "none"], "no such database"),
        (["apply", "missing.yaml", "--into", "ppo.yaml"], "tuned file missing.yaml does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_1(tmp_path, args, fragment):
    for name, text in SPACES.items():
        (tmp_path / name).write_text(text)
    proc = run_cli(args, cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("trial-*"))


def test_dry_run_prints_argv_and_env_and_runs_nothing(tmp_path):
    proc = run_cli(
        [
            "run",
            "--dry-run",
            "--set",
            "NCCL_ALGO=Ring",
            "--stall-timeout",
            "2m",
            "--steps",
            "4",
            "--",
            "bash",
            "-c",
            "exit 3",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stall 120s" in proc.stdout and "1 warm-up + 4 measured steps" in proc.stdout
    assert "trainer.micro_train_batch_size_per_gpu=1" in proc.stdout
    assert "NCCL_ALGO=Ring" in proc.stdout and "SKYRL_WORKER_NCCL_TIMEOUT_IN_S=180" in proc.stdout
    assert re.search(r"^NCCL check( off: .+|: each new set of NCCL values .+)$", proc.stdout, re.M), proc.stdout
    assert not (tmp_path / "results").exists()


def test_help_shows_flags_as_flags(tmp_path):
    proc = run_cli(["run", "--help"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    dry = [line for line in proc.stdout.splitlines() if "--dry-run" in line]
    assert dry and "<bool>" not in proc.stdout and "bool" not in dry[0], proc.stdout
