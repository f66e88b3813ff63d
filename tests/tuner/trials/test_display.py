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
    # a trial's end line, whatever its status (on a loaded machine the early stop may end one as budget)
    statuses = "|".join(c.value for c in FailureClass)
    ends = [line for line in lines if re.match(rf"trial \d+ ({statuses}) ", line)]
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


def _oom(number: int, pid: int) -> TrialResult:
    line = (
        f"(skyrl_entrypoint pid={pid}) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.21 GiB is free."
    )
    verdict = Verdict(FailureClass.OOM, evidence=(Evidence(3, line),), advice="lower the micro-batch size")
    return TrialResult(number=number, status=FailureClass.OOM, stop_reason=StopReason.EXITED, verdict=verdict)


def test_a_failure_that_repeats_an_earlier_one_is_said_once():
    buf = io.StringIO()
    display = Display(Console(file=buf, width=80), load_space("skyrl-text2sql"))
    display.trial_finished(4, _oom(4, 100), near_wall=False, incumbent=None)
    display.trial_finished(6, _oom(6, 200), near_wall=False, incumbent=None)  # another pid, the same failure
    first, second = buf.getvalue().splitlines()
    assert "Tried to allocate" in first and "advice: lower the micro-batch size" in first
    assert "> 79.2 GiB, +2.0 GiB asked" in first  # over the wall, with what PyTorch asked for
    assert second.startswith("trial 6 oom") and "same as trial 4" in second
    assert "Tried to allocate" not in second and "advice" not in second


def test_a_trial_start_shows_its_changes_from_the_incumbent_and_how_far_the_run_is():
    from nccl_tune.tuner.records.stability import candidates
    from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord

    space = load_space("skyrl-text2sql")
    defaults = {p.name: p.default for p in space.parameters}
    buf = io.StringIO()
    display = Display(Console(file=buf, width=80), space)
    display.header("s", "sqlite://", False, 0, 8, "train")
    display.trial_started(0, "baseline", defaults)
    ok = TrialResult(
        number=0, status=FailureClass.OK, stop_reason=StopReason.MEASURED, verdict=Verdict(FailureClass.OK)
    )
    record = TrialRecord(0, None, defaults, TrialKind.BASELINE, Outcome.LAUNCHED, FailureClass.OK, ok)
    (incumbent,) = candidates([record])
    display.trial_finished(0, ok, near_wall=False, incumbent=incumbent)
    moved = {**defaults, "NCCL_ALGO": "Tree"}
    display.trial_started(1, "search", moved)
    lines = buf.getvalue().splitlines()
    start = lines[-1]
    assert start.startswith("trial 1 started (search): NCCL_ALGO=Tree (vs best: trial 0)"), start
    assert "[trial 2/8 · " in start and "s left]" in start, start  # how far, and the time left
    assert "trial 1/8 · " in next(line for line in lines if line.startswith("trial 0 started"))


def test_the_incumbent_is_named_when_it_changes_and_says_why_it_fell_back():
    from nccl_tune.tuner.records.stability import candidates
    from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord

    space = load_space("skyrl-text2sql")
    defaults = {p.name: p.default for p in space.parameters}
    other = {**defaults, "NCCL_ALGO": "Tree"}

    def run(number: int, values: dict, step_s: float) -> tuple[TrialResult, TrialRecord]:
        result = TrialResult(
            number=number,
            status=FailureClass.OK,
            stop_reason=StopReason.MEASURED,
            verdict=Verdict(FailureClass.OK),
            step_times_s=(step_s, step_s),
            samples_per_step=8.0,
        )
        return result, TrialRecord(number, None, values, TrialKind.SEARCH, Outcome.LAUNCHED, FailureClass.OK, result)

    buf = io.StringIO()
    display = Display(Console(file=buf, width=80), space)
    seen: list[TrialRecord] = []

    def finish(number: int, values: dict, step_s: float, leader_values: dict) -> str:
        display.trial_started(number, "search", values)
        result, record = run(number, values, step_s)
        seen.append(record)
        leader = next(c for c in candidates(seen) if dict(c.values) == leader_values)
        display.trial_finished(number, result, near_wall=False, incumbent=leader)
        return buf.getvalue().splitlines()[-1]

    assert finish(0, defaults, 0.1, defaults).endswith("best so far: trial 0 80.0 samples/s")
    assert "new best: trial 1 100.0 samples/s, +25.0% over trial 0" in finish(1, other, 0.08, other)
    assert "best" not in finish(2, defaults, 0.1, other)  # the incumbent did not change: nothing said
    line = finish(3, other, 0.2, defaults)  # its re-run ran slow: the mean falls below trial 0
    assert (
        "best now: trial 0 80.0 samples/s, mean of 2 runs; trial 1 fell back: its re-run, trial 3, ran at 40.0" in line
    )
