"""The live display prints log text as text: brackets in evidence are not markup."""

import io

from rich.console import Console

from nccl_tune.failure import OK_VERDICT, Evidence, FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.display import Display, describe, fmt_mem


def test_evidence_with_brackets_is_printed_verbatim():
    buf = io.StringIO()
    display = Display(Console(file=buf, width=200), load_space("skyrl-text2sql"))
    line = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out [bold]"
    result = TrialResult(
        number=3,
        status=FailureClass.COLLECTIVE_TIMEOUT,
        stop_reason=StopReason.EXITED,
        verdict=Verdict(FailureClass.COLLECTIVE_TIMEOUT, evidence=(Evidence(12, line),), advice="see [fr] dumps"),
    )
    display.trial_finished(3, result, near_wall=False, incumbent=None)
    text = buf.getvalue()
    assert line in text and "see [fr] dumps" in text


def test_describe_leaves_out_unset_env_and_unchanged_values():
    space = load_space("skyrl-text2sql")
    base = space.defaults()
    values = {**base, "trainer.micro_train_batch_size_per_gpu": 4, "NCCL_PROTO": "LL128"}
    assert describe(space, values, base) == "micro_train_batch_size_per_gpu=4 NCCL_PROTO=LL128"
    assert "NCCL_ALGO" not in describe(space, values)


def test_piped_output_at_80_columns_is_one_unbroken_line_per_trial(tmp_path):
    """As in CI or `| tee`: no table, no identifier or number broken across lines, evidence whole."""
    import re
    import sys

    from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

    # random search reaches micro=8 (an OOM); the default sampler predicts it runs out and never launches it
    proc = run_cli(
        [
            "run",
            "--space",
            str(TINY_SPACE),
            "--study",
            "p",
            "--trials",
            "4",
            "--seed",
            "6",
            "--confirm",
            "0",
            "--sampler",
            "random",
            "--set",
            "trainer.offload=false",
            "--",
            sys.executable,
            str(TINY_TRAINER),
        ],
        cwd=tmp_path,
        env={"COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not any(ch in proc.stdout for ch in "┃│┏━"), proc.stdout  # no table
    ends = [line for line in lines if re.match(r"trial \d+ (ok|oom|crash)", line)]
    assert len(ends) == 4, proc.stdout
    oom = [line for line in ends if " oom " in line]
    assert oom and re.search(
        r"Tried to allocate \d+\.\d\d GiB\. GPU 0 has a total capacity of 79\.19 GiB of which "
        r"1\.21 GiB is free\. \| advice: ",
        oom[0],
    ), oom
    summary = lines[lines.index("trials:") + 1 :]
    rows = [line for line in summary if line.startswith("  trial ")][:4]
    assert len(rows) == 4 and all(re.search(r"micro=\d|baseline values", r) for r in rows), summary
    assert rows[0].startswith("  trial 0 baseline ok")
    report = run_cli(["report"], cwd=tmp_path, env={"COLUMNS": "80"})
    assert report.returncode == 0 and not any(ch in report.stdout for ch in "┃│┏━"), report.stdout
    failures = report.stdout.splitlines()[report.stdout.splitlines().index("failures:") + 1 :]
    assert re.search(
        r"^  trial \d+ oom: micro=8[^|]* \| .*Tried to allocate \d+\.\d\d GiB\. GPU 0 .* \| advice: ", failures[0]
    )


def test_long_evidence_is_shortened_between_words():
    from nccl_tune.tuner.display import shorten

    text = "CUDA out of memory. Tried to allocate 123456.78 GiB " * 20
    short = shorten(text, 100)
    assert len(short) <= 104 and short.endswith(" ...")
    assert text.startswith(short[:-4]) and text[len(short) - 4] == " "  # cut at a space, not in a number


def test_a_trial_line_names_the_phase_that_held_the_peak():
    """Where a run reported memory per phase, its line says which phase peaked: its knobs move the peak."""

    def shown(phases: dict[str, float]) -> str:
        memory = MemoryReport("nvml", gpus=(GpuMemory(0, 80.0, 63.2),), phase_peak_frac=phases)
        return fmt_mem(
            TrialResult(
                number=1, status=FailureClass.OK, verdict=OK_VERDICT, stop_reason=StopReason.MEASURED, memory=memory
            )
        )

    assert shown({"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05}) == "63.2 GiB (79% in policy_train)"
    assert shown({"step": 0.79}) == "63.2 GiB (79%)"
