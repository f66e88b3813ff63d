"""Hang detection and teardown of LocalLauncher, measured on the synthetic twin.

Runs ``bash examples/run_skyrl_sql_sim.sh`` through ``LocalLauncher`` with ``SIM_FAULT=hang:RANK:STEP``
(one rank stops inside a collective; the others wait for it) and measures, per run:

- detect: from the arrival of the last progress line to the stall verdict, against the stall
  deadline in force (target: deadline + 2 s);
- teardown: from the verdict to no process of the trial left on the machine, found independently
  by its marker (target: grace + 2 s), and the survivors (target: 0);

then runs pairs of healthy trials and measures the tuner's own overhead between two trials:
from the decision that a trial has measured enough to the next trial's command being started
(teardown, classification, result.json, the gate, spec.json, spawn; target: 1 s).

The twin's collective timeout (``SKYRL_WORKER_NCCL_TIMEOUT_IN_S``) is left far above the stall
timeout, as nccl-tune's point is to find a stall well before NCCL's watchdog would.

    python benchmarks/hang.py [--runs 6] [--pairs 3] [--stall-timeout 4] [--grace 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import TrialObserver, TrialProgress
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.progress import ProgressState
from nccl_tune.launchers.supervise import Watch
from nccl_tune.launchers.teardown import find_marked, kill_marked, study_match
from nccl_tune.trial import Clocks, StopReason, StopRule, TrialResult, TrialSpec

REPO = Path(__file__).resolve().parents[1]
TWIN = REPO / "examples" / "run_skyrl_sql_sim.sh"
DETECT_MARGIN_S = 2.0
TEARDOWN_MARGIN_S = 2.0
OVERHEAD_TARGET_S = 1.0
FAULTS = ("hang:1:2", "hang:0:2,orphan", "hang:1:3", "hang:0:1")
"""Cycled over the runs: which rank stalls at which step (``orphan`` adds a detached child that
ignores SIGTERM, as Ray workers do)."""


class Timeline(TrialObserver):
    """Records when things happened, and watches for the trial's processes after the verdict."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.last_progress: float | None = None
        self.stopping: float | None = None
        self.reason: StopReason | None = None
        self.gone: float | None = None
        self._watch: threading.Thread | None = None

    def on_start(self, spec: TrialSpec, pid: int | None) -> None:
        self.started = time.monotonic()

    def should_stop(self, spec: TrialSpec, progress: TrialProgress) -> StopReason | None:
        if progress.step_times_s or progress.open_phase:
            # the reader thread stamps each line on arrival; this recovers that stamp
            self.last_progress = time.monotonic() - progress.last_progress_s
        return None

    def on_stopping(self, spec: TrialSpec, reason: StopReason, detail: str) -> None:
        self.stopping = time.monotonic()
        self.reason = reason
        self._watch = threading.Thread(target=self._until_gone, args=(spec.marker,), daemon=True)
        self._watch.start()

    def _until_gone(self, marker: str) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not find_marked(marker.__eq__):
                self.gone = time.monotonic()
                return
            time.sleep(0.02)

    def join(self) -> None:
        if self._watch is not None:
            self._watch.join(130)


@dataclass(frozen=True)
class HangRun:
    fault: str
    status: str
    stop_reason: str
    phase: str | None
    deadline_s: float
    detect_s: float | None
    detect_over_deadline_s: float | None
    teardown_s: float | None
    grace_s: float
    escaped: int
    survivors: int
    left_after: int
    ok: bool


@dataclass(frozen=True)
class OverheadPair:
    post_trial_s: float
    """Stop decision -> run() returned (teardown, classification, result.json)."""
    between_s: float
    """run() returned -> next command started (gate, spec.json, spawn)."""
    total_s: float
    statuses: tuple[str, str]
    ok: bool


@dataclass
class Report:
    runs: list[HangRun] = field(default_factory=list)
    pairs: list[OverheadPair] = field(default_factory=list)


def _spec(study: str, number: int, root: Path, env: dict[str, str], clocks: Clocks) -> TrialSpec:
    return TrialSpec(
        study=study,
        number=number,
        params={},
        argv=("bash", str(TWIN)),
        env=env,
        trial_dir=root / f"trial-{number:04d}",
        clocks=clocks,
        stop=StopRule(1, 2),
    )


def _deadline(clocks: Clocks, result: TrialResult) -> float:
    """The stall deadline that was in force when the trial went silent."""
    state = ProgressState(
        phase_max_s=result.phase_max_s, open_phases=(result.verdict.phase,) if result.verdict.phase else ()
    )
    return Watch(clocks, StopRule(), 0.0).stall_deadline_s(state)


def hang_runs(args: argparse.Namespace, root: Path, study: str, console: Console) -> list[HangRun]:
    clocks = Clocks(
        startup_timeout_s=180,
        stall_timeout_s=args.stall_timeout,
        stall_floor_s=args.stall_timeout,
        stall_multiplier=3.0,
        trial_timeout_s=600,
        grace_s=args.grace,
    )
    launcher = LocalLauncher()
    launcher.before_study()
    out = []
    for i in range(args.runs):
        fault = FAULTS[i % len(FAULTS)]
        env = {"SIM_FAULT": fault, "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "7200"}
        launcher.gate()
        timeline = Timeline()
        result = launcher.run(_spec(study, i, root, env, clocks), timeline)
        timeline.join()
        deadline = _deadline(clocks, result)
        detect = timeline.stopping - timeline.last_progress if timeline.stopping and timeline.last_progress else None
        teardown = timeline.gone - timeline.stopping if timeline.gone and timeline.stopping else None
        left = len(find_marked(study_match(study)))
        ok = (
            result.status is FailureClass.HANG
            and detect is not None
            and detect <= deadline + DETECT_MARGIN_S
            and teardown is not None
            and teardown <= args.grace + TEARDOWN_MARGIN_S
            and result.survivors == 0
            and left == 0
        )
        run = HangRun(
            fault,
            result.status.value,
            result.stop_reason.value,
            result.verdict.phase,
            round(deadline, 2),
            None if detect is None else round(detect, 3),
            None if detect is None else round(detect - deadline, 3),
            None if teardown is None else round(teardown, 3),
            args.grace,
            result.escaped_processes,
            result.survivors,
            left,
            ok,
        )
        console.print(
            f"hang run {i + 1}/{args.runs}: {fault} -> {run.status}, detect {run.detect_s} s, teardown {run.teardown_s} s"
        )
        out.append(run)
    launcher.close()
    return out


def overhead_pairs(args: argparse.Namespace, root: Path, study: str, console: Console) -> list[OverheadPair]:
    clocks = Clocks(startup_timeout_s=180, stall_timeout_s=60, trial_timeout_s=600, grace_s=args.grace)
    launcher = LocalLauncher()
    launcher.before_study()
    out = []
    number = 1000
    for i in range(args.pairs):
        first, second = Timeline(), Timeline()
        launcher.gate()
        r1 = launcher.run(_spec(study, number, root, {}, clocks), first)
        returned = time.monotonic()
        launcher.gate()
        r2 = launcher.run(_spec(study, number + 1, root, {}, clocks), second)
        number += 2
        post = returned - first.stopping
        between = second.started - returned
        ok = r1.status is FailureClass.OK and r2.status is FailureClass.OK and post + between <= OVERHEAD_TARGET_S
        pair = OverheadPair(
            round(post, 3), round(between, 3), round(post + between, 3), (r1.status.value, r2.status.value), ok
        )
        console.print(f"overhead pair {i + 1}/{args.pairs}: {pair.total_s} s ({r1.status.value}, {r2.status.value})")
        out.append(pair)
    launcher.close()
    return out


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=6, help="hang runs (default 6)")
    p.add_argument("--pairs", type=int, default=3, help="pairs of healthy trials for the overhead (default 3)")
    p.add_argument("--stall-timeout", type=float, default=4.0, help="stall timeout and floor, seconds (default 4)")
    p.add_argument("--grace", type=float, default=2.0, help="SIGTERM-to-SIGKILL grace, seconds (default 2)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args = p.parse_args(argv)
    if not TWIN.exists():
        raise SystemExit(f"{TWIN} not found: the synthetic twin is needed for this benchmark")

    console = Console(width=140)
    study = f"bench-hang-{uuid.uuid4().hex[:8]}"
    report = Report()
    with tempfile.TemporaryDirectory(prefix="nccl-tune-hang-") as tmp:
        try:
            report.runs = hang_runs(args, Path(tmp), study, console)
            report.pairs = overhead_pairs(args, Path(tmp), study, console)
        finally:
            kill_marked(study_match(study), 1.0)

    table = Table(title="hang detection and teardown (LocalLauncher on the synthetic twin)")
    for col in (
        "fault",
        "status",
        "phase",
        "deadline s",
        "detect s",
        "over deadline s",
        "teardown s",
        "escaped",
        "survivors",
        "ok",
    ):
        table.add_column(col, justify="left" if col in ("fault", "status", "phase") else "right")
    for r in report.runs:
        table.add_row(
            r.fault,
            r.status,
            r.phase or "-",
            f"{r.deadline_s:g}",
            str(r.detect_s),
            str(r.detect_over_deadline_s),
            str(r.teardown_s),
            str(r.escaped),
            str(r.survivors + r.left_after),
            "yes" if r.ok else "NO",
        )
    console.print(table)
    over = [r.detect_over_deadline_s for r in report.runs if r.detect_over_deadline_s is not None]
    tear = [r.teardown_s for r in report.runs if r.teardown_s is not None]
    totals = [x.total_s for x in report.pairs]
    summary = Table(title="targets (median / max)")
    for col in ("what", "measured", "target", "met"):
        summary.add_column(col)
    summary.add_row(
        "last progress line -> hang verdict, beyond the deadline",
        _stat(over),
        f"<= {DETECT_MARGIN_S:g} s",
        "yes" if over and max(over) <= DETECT_MARGIN_S else "NO",
    )
    summary.add_row(
        "verdict -> no process left",
        _stat(tear),
        f"<= grace {args.grace:g} + {TEARDOWN_MARGIN_S:g} s",
        "yes" if tear and max(tear) <= args.grace + TEARDOWN_MARGIN_S else "NO",
    )
    summary.add_row(
        "survivors",
        str(sum(r.survivors + r.left_after for r in report.runs)),
        "0",
        "yes" if all(r.survivors + r.left_after == 0 for r in report.runs) else "NO",
    )
    summary.add_row(
        "tuner overhead between two trials",
        _stat(totals),
        f"<= {OVERHEAD_TARGET_S:g} s",
        "yes" if totals and max(totals) <= OVERHEAD_TARGET_S else "NO",
    )
    console.print(summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "benchmark": "hang",
            "stall_timeout_s": args.stall_timeout,
            "grace_s": args.grace,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "runs": [asdict(r) for r in report.runs],
            "pairs": [asdict(x) for x in report.pairs],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    all_ok = all(r.ok for r in report.runs) and all(x.ok for x in report.pairs)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
