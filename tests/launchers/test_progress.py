"""Progress rules applied to log lines: phases, steps, memory lines, prefilter literals."""

from __future__ import annotations

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.logstream import LineScanner
from nccl_tune.launchers.memory import build_report
from nccl_tune.launchers.progress import ProgressLedger, ProgressTracker, required_literal, required_literals
from nccl_tune.trial import OUTSIDE_PHASES, SILENCE_PHASE, ProgressRules


@pytest.mark.parametrize(
    "pattern, literal",
    [
        (r"Finished: '(?P<phase>[^']+)', time cost: (?P<s>\d+)s", "', time cost: "),
        (r"^Training done!$", "Training done!"),
        (r"(?:rank (?P<rank>\d+) .*?)?memory: (?P<gib>\d+)GiB", "memory: "),
        (r"iter(?:ation)? \d+", "iter"),
        (r"x(abc)+y", "abc"),
        (r"(?i)finished", None),
        (r"step|iteration", None),
        (r"\d+ it/s", " it/s"),
        (r"ab", None),
    ],
)
def test_required_literal(pattern: str, literal: str | None) -> None:
    assert required_literal(pattern) == literal


def feed(tracker: ProgressTracker, lines: list[str]) -> None:
    for i, text in enumerate(lines, 1):
        tracker.feed(i, text, float(i))


def test_phases_steps_and_memory() -> None:
    t = ProgressTracker(ProgressRules())
    feed(
        t,
        [
            "Started: 'step'",
            "Started: 'generate'",
            "Finished: 'generate', time cost: 1200.50s",
            "Started: 'policy_train'",
            "rank 3 step 0 memory: 61.20GiB(77.1%)",
            "rank 3 step 0 memory: 60.00GiB(75.6%)",
            "memory: 12.00GiB",
            "Finished: 'policy_train', time cost: 81.23s",
            "Finished: 'step', time cost: 1300.00s",
            "Started: 'step'",
            "Started: 'generate'",
        ],
    )
    s = t.snapshot()
    assert s.step_times_s == (1300.0,)
    phases = {k: v for k, v in s.phase_max_s.items() if k != SILENCE_PHASE}  # the waits: test_supervise
    assert phases == {"generate": 1200.5, "policy_train": 81.23, "step": 1300.0}
    assert s.open_phases == ("step", "generate") and s.open_phase == "generate"
    assert s.memory_peak_gib[3] == 61.2 and s.memory_peak_gib[None] == 12.0
    assert s.memory_total_gib[3] == pytest.approx(61.2 / 0.771, rel=1e-3)
    assert s.first_progress_t == 1.0 and s.last_progress_t == 11.0
    kinds = [e.kind for e in t.drain_events()]
    assert kinds.count("step") == 1 and kinds.count("memory") == 3 and kinds.count("phase_start") == 5
    assert t.drain_events() == []


def test_memory_lines_count_under_the_phase_open_when_they_were_read() -> None:
    t = ProgressTracker(ProgressRules())
    feed(
        t,
        [
            "Started: 'step'",
            "Started: 'generate'",
            "rank 0 step 0 memory: 64.00GiB(80.0%)",
            "rank 1 step 0 memory: 40.00GiB(50.0%)",
            "Finished: 'generate', time cost: 1.20s",
            "rank 1 step 0 memory: 76.00GiB",  # no total on the line: not counted per phase
            "Started: 'policy_train'",
            "rank 1 step 0 memory: 56.00GiB(70.0%)",
            "Finished: 'policy_train', time cost: 0.80s",
            "rank 0 step 0 memory: 16.00GiB(20.0%)",  # the step is the innermost phase open
            "Finished: 'step', time cost: 2.00s",
            "rank 1 step 1 memory: 8.00GiB(10.0%)",  # between steps
            "Started: 'step'",
            "Started: 'generate'",
            "rank 0 step 1 memory: 48.00GiB(60.0%)",  # the last line with a rank
            "Started: 'evaluate'",
            "memory: 79.00GiB(98.8%)",  # no rank: the report drops it, as lines with a rank say more
        ],
    )
    t.feed_memory(1, "rank 0 step 1 memory: 78.00GiB(97.5%)", 0.0)  # a worker's file, read after the trial
    s = t.snapshot()
    assert dict(s.memory_phase_peak_frac[0]) == pytest.approx({"generate": 0.8, "step": 0.2})
    assert dict(s.memory_phase_peak_frac[1]) == pytest.approx(
        {"generate": 0.5, "policy_train": 0.7, OUTSIDE_PHASES: 0.1}
    )
    assert dict(s.memory_phase_peak_frac[None]) == pytest.approx({"evaluate": 0.988})
    assert list(s.memory_phases_last.items()) == [
        (1, (OUTSIDE_PHASES,)),
        (0, ("step", "generate")),
        (None, ("step", "generate", "evaluate")),
    ]

    report = build_report(None, s, {})
    assert report.source == "log" and [g.peak_gib for g in report.gpus] == [78.0, 76.0]
    assert dict(report.phase_peak_frac) == pytest.approx(
        {"generate": 0.8, "policy_train": 0.7, "step": 0.2, OUTSIDE_PHASES: 0.1}
    )
    assert report.phases_open_at_end == ("step", "generate")
    assert report.max_peak_frac == pytest.approx(0.975, abs=1e-3)  # the worker's line counts for its GPU only


def test_memory_lines_are_not_progress() -> None:
    t = ProgressTracker(ProgressRules())
    feed(t, ["Started: 'step'", "rank 0 memory: 1.00GiB"])
    assert t.snapshot().last_progress_t == 1.0


def test_a_phase_that_finishes_closes_inner_phases_that_never_did() -> None:
    t = ProgressTracker(ProgressRules())
    feed(t, ["Started: 'step'", "Started: 'generate'", "Started: 'inner'", "Finished: 'generate', time cost: 2.00s"])
    assert t.snapshot().open_phases == ("step",)


def test_training_done() -> None:
    t = ProgressTracker(ProgressRules())
    feed(t, ["x", "2026-03-02 | INFO | Training done!"])
    assert t.snapshot().training_done


def test_custom_rules_without_literals_still_work_through_the_scanner() -> None:
    rules = ProgressRules(
        step_end=r"(?i)iteration\s+\d+/\s*\d+ \| elapsed time per iteration \(ms\): (?P<seconds>[\d.]+)",
        phase_start=r"Started: '(?P<phase>[^']+)'",
        phase_end=r"Finished: '(?P<phase>[^']+)', time cost: (?P<seconds>\d+(?:\.\d+)?)s",
        memory=None,
        training_done=None,
    )
    tracker = ProgressTracker(rules)
    assert tracker.literals is None
    scanner = LineScanner(tracker.feed, tracker.literals)
    scanner.feed(b" ITERATION      10/  100 | elapsed time per iteration (ms): 97012.5 | lr: 1e-5\n")
    assert tracker.snapshot().step_times_s == (97012.5,)


def test_default_rules_have_literals() -> None:
    assert required_literals(ProgressRules()) is not None


def test_a_broken_rule_names_itself() -> None:
    with pytest.raises(
        NcclTuneError, match=r"progress rule phase_start='Started: \(' is not a valid regular expression"
    ):
        ProgressTracker(ProgressRules(phase_start="Started: ("))


def test_events_fed_to_the_ledger_mean_what_their_lines_mean() -> None:
    by_lines = ProgressTracker(ProgressRules())
    feed(
        by_lines,
        [
            "Started: 'step'",
            "Started: 'generate'",
            "Started: 'inner'",
            "Finished: 'generate', time cost: 2.50s",
            "Finished: 'step', time cost: 4.00s",
            "Started: 'step'",
        ],
    )
    direct = ProgressLedger()
    direct.phase_started("step", 1.0)
    direct.phase_started("generate", 2.0)
    direct.phase_started("inner", 3.0)
    direct.phase_finished("generate", 2.5, 4.0)
    assert direct.step_finished(4.0, 5.0) == 0
    direct.phase_started("step", 6.0)
    lines, events = by_lines.snapshot(), direct.snapshot()
    assert events.step_times_s == lines.step_times_s == (4.0,) and events.open_phases == lines.open_phases == ("step",)
    assert events.phase_max_s == {"generate": 2.5, "step": 4.0, SILENCE_PHASE: 1.0}
    assert {k: v for k, v in lines.phase_max_s.items() if k != SILENCE_PHASE} == {"generate": 2.5, "step": 4.0}
    assert (
        (events.first_progress_t, events.last_progress_t)
        == (lines.first_progress_t, lines.last_progress_t)
        == (1.0, 6.0)
    )


def test_skyrl_steps_carry_their_tokens_and_their_memory_lines_their_step() -> None:
    """SkyRL prints a step's metrics after the step (``generate/max_num_tokens`` an int in the pprint);
    its workers' memory lines name the step, and come from a file read after the trial."""
    from nccl_tune.presets import SKYRL

    t = ProgressTracker(SKYRL)
    head = "2026-03-02 10:11:12.345 | INFO     | skyrl_train.trainer:train:221 - "
    lines = []
    for step, tokens in ((1, 5585), (2, 5850), (3, 4691)):
        lines += [
            head + "Started: 'step'",
            head + "Finished: 'step', time cost: 230.10s",
            head + f"Step {step}: ",
            f"{{'generate/avg_num_tokens': '612.3051',\n 'generate/max_num_tokens': {tokens},",
            " 'generate/min_num_tokens': 57,",
        ]
    feed(t, [part for line in lines for part in line.split("\n")])
    for step, gib in ((1, 52.2), (2, 55.0), (3, 50.1)):
        for rank in (0, 5):
            text = f"fsdp_worker:ppo_train:706 - rank {rank} step {step} peak memory: {gib - rank * 0.1:.2f}GiB(66.0%)"
            t.feed_memory(0, text.replace("(66.0%)", f"({100 * (gib - rank * 0.1) / 79.15:.1f}%)"), 0.0)
    state = t.snapshot()
    assert state.step_tokens == (5585.0, 5850.0, 4691.0)
    assert [round(x * 79.15, 1) for x in state.step_peak_frac] == [52.2, 55.0, 50.1]
    assert build_report(None, state, {}).step_peak_frac == state.step_peak_frac
    # A live memory line without a step belongs to the step running when it is read.
    live = ProgressTracker(SKYRL)
    feed(
        live,
        [head + "Started: 'step'", "rank 0 peak memory: 40.00GiB(50.0%)", head + "Finished: 'step', time cost: 1.00s"],
    )
    assert live.snapshot().step_peak_frac == (0.5,) and live.snapshot().step_tokens == ()


def test_a_step_tokens_rule_needs_its_group() -> None:
    from nccl_tune.launchers.progress import check_rules

    with pytest.raises(NcclTuneError, match="step_tokens: unknown group 'n'"):
        check_rules(ProgressRules(step_end=("x",), step_tokens=r"num_tokens: (?P<n>\d+)"), "space")
    with pytest.raises(NcclTuneError, match="step_tokens: the rule needs a group named tokens"):
        check_rules(ProgressRules(step_end=("x",), step_tokens=r"num_tokens: \d+"), "space")
