"""A minimal tuner-like driver of LocalLauncher for signal tests.

    driver.py --study S --results DIR [--handlers] [--trials N] -- TRAINER_ARGS...

On start it does what a resuming tuner does: reap processes left by an earlier driver of the
study and record its unfinished trials as interrupted. Then it runs a quick good trial and,
from the second trial on, the fake trainer with TRAINER_ARGS. Exit 130 when interrupted.
With --handlers, SIGINT/SIGTERM set a flag the observer reports (the tuner's way); without, a
SIGINT raises KeyboardInterrupt inside LocalLauncher.run (even when the driver's parent ignored
SIGINT, which a child inherits).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from nccl_tune.launchers.base import TrialObserver
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.trial_files import RESULT_FILE, SPEC_FILE, interrupted_result
from nccl_tune.trial import Clocks, StopReason, StopRule, TrialSpec

FAKE_TRAINER = Path(__file__).with_name("fake_trainer.py")


class FlagObserver(TrialObserver):
    def __init__(self) -> None:
        self.flag: str | None = None

    def should_stop(self, spec, progress):
        return StopReason.INTERRUPTED if self.flag else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--study", required=True)
    p.add_argument("--results", required=True, type=Path)
    p.add_argument("--handlers", action="store_true")
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("trainer_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    trainer_args = [a for a in args.trainer_args if a != "--"]

    launcher = LocalLauncher()
    for desc in launcher.reap(args.study):
        print(f"reaped {desc}", flush=True)
    first = 0
    for folder in sorted(args.results.glob("trial-*")):
        number = int(folder.name.split("-")[1])
        first = max(first, number + 1)
        if (folder / SPEC_FILE).exists() and not (folder / RESULT_FILE).exists():
            rec = interrupted_result(folder, number, "the tuner was killed while this trial ran")
            print(f"recorded trial {number} as {rec.status.value}", flush=True)

    observer = FlagObserver()
    # Python installs its KeyboardInterrupt handler only when SIGINT was not ignored at start-up, and a
    # child inherits an ignored SIGINT (a test worker can run with SIGHUP, SIGINT and SIGQUIT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.handlers:

        def on_signal(signum, _frame):
            observer.flag = signal.Signals(signum).name

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    launcher.before_study()
    for number in range(first, first + args.trials):
        quick = number == first
        argv = [sys.executable, str(FAKE_TRAINER)] + (["--steps", "3", "--step-s", "0.1"] if quick else trainer_args)
        spec = TrialSpec(
            study=args.study,
            number=number,
            params={},
            argv=argv,
            env={},
            trial_dir=args.results / f"trial-{number}",
            clocks=Clocks(startup_timeout_s=60, stall_timeout_s=60, grace_s=1.0),
            stop=StopRule(1, 2) if quick else StopRule(1, 1000),  # a long trial lasts until it is signalled
        )
        launcher.gate()
        print(f"trial {number} starting", flush=True)
        try:
            result = launcher.run(spec, observer)
        except KeyboardInterrupt:
            print(f"trial {number} interrupted by KeyboardInterrupt", flush=True)
            return 130
        print(f"trial {number} {result.status.value} {json.dumps(result.to_json()['stop_reason'])}", flush=True)
        if observer.flag:
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
