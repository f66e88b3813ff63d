"""The live display prints log text as text: brackets in evidence are not markup."""

import io

from rich.console import Console

from nccl_tune.failure import Evidence, FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.trials.display import Display


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
