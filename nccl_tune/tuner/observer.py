"""The tuner's ``TrialObserver``: live progress, early stopping and screening against the
incumbent, and turning SIGINT/SIGTERM into a clean teardown of the running trial.

Screening (``stop.screen_steps`` > 0) is a two-rung successive-halving rule decided inside the
running trial: after the warm-up and ``screen_steps`` measured steps, a trial whose throughput does
not clear the bar (``screening.ScreenBar``: the incumbent's throughput as the study's model
estimates it, less a reach that follows the noise) is stopped; one within reach runs every measured
step. The trial is not restarted, so screening costs no second start-up."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from nccl_tune.launchers.base import TrialObserver, TrialProgress
from nccl_tune.trial import StopReason, TrialSpec
from nccl_tune.tuner.display import Display
from nccl_tune.tuner.screening import ScreenBar
from nccl_tune.tuner.stability import Candidate


class InterruptFlag:
    """Set by SIGINT/SIGTERM while installed; the loop and the observer poll it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def __enter__(self) -> "InterruptFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class TunerObserver(TrialObserver):
    """Progress to the display; stop on interrupt or when clearly slower than the incumbent."""

    def __init__(
        self,
        display: Display,
        interrupt: InterruptFlag,
        incumbent: Candidate | None,
        early_stop_ratio: float,
        screen: ScreenBar | None = None,
    ) -> None:
        """``screen``: the bar a screened trial must clear (None: no screening)."""
        self.display = display
        self.interrupt = interrupt
        self.early_stop_ratio = early_stop_ratio
        self.reference: tuple[float, tuple[float, ...]] | None = None
        """The incumbent's best run (samples per step, step times): what the early stop compares each step with."""
        if incumbent is not None and incumbent.ok_runs:
            best = max(incumbent.ok_runs, key=lambda r: r.throughput or 0.0)
            if best.result and best.result.samples_per_step:
                self.reference = (best.result.samples_per_step, best.result.step_times_s)
        self.screen = screen
        self.why: str | None = None
        """Why the last early stop was asked for (``stop_detail``)."""

    def on_phase(self, spec: TrialSpec, phase: str, seconds: float) -> None:
        self.display.progress(f"{phase} done in {seconds:.1f}s")

    def on_step(self, spec: TrialSpec, step_index: int, seconds: float) -> None:
        total = spec.stop.total_steps
        self.display.progress(f"step {step_index + 1}/{total} in {seconds:.1f}s")

    def slower_than_incumbent(self, spec: TrialSpec, step_times_s: tuple[float, ...]) -> str | None:
        """Why the trial is slower than the incumbent, when some finished step ran below
        ``early_stop_ratio`` of the incumbent's same step; else None."""
        if self.reference is None or not self.early_stop_ratio or not spec.samples_per_step:
            return None
        ref_samples, ref_times = self.reference
        for i, t in enumerate(step_times_s):
            if i >= len(ref_times) or t <= 0 or ref_times[i] <= 0:
                continue
            ratio = (spec.samples_per_step / t) / (ref_samples / ref_times[i])
            if ratio < self.early_stop_ratio:
                return (f"step {i + 1} ran at {ratio:.0%} of the incumbent's step {i + 1} (the early stop is below "
                        f"{self.early_stop_ratio:.0%})")
        return None

    def screened_out(self, spec: TrialSpec, step_times_s: tuple[float, ...]) -> str | None:
        """Why the trial is stopped at the screening point, when its screened steps do not clear the
        bar; else None."""
        screen, warm = spec.stop.screen_steps, spec.stop.warmup_steps
        if not screen or self.screen is None or not spec.samples_per_step:
            return None
        if len(step_times_s) != warm + screen:
            return None
        measured = [t for t in step_times_s[warm:] if t > 0]
        if len(measured) < screen:
            return None
        per_s = spec.samples_per_step / (sum(measured) / len(measured))
        bar = self.screen
        if not bar.stops(per_s):
            return None
        return (f"{per_s:,.1f} samples/s over {screen} screened step{'s' if screen > 1 else ''}, under the bar of "
                f"{bar.floor_per_s:,.1f} (the incumbent's {bar.incumbent_per_s:,.1f} as modelled, less "
                f"{bar.reach_frac:.0%})")

    def should_stop(self, spec: TrialSpec, progress: TrialProgress) -> StopReason | None:
        if self.interrupt.is_set:
            return StopReason.INTERRUPTED
        self.why = self.slower_than_incumbent(spec, progress.step_times_s) or self.screened_out(
            spec, progress.step_times_s)
        return StopReason.EARLY_STOP if self.why else None

    def stop_detail(self) -> str | None:
        return self.why
