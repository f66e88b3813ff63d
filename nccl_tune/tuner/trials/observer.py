"""The tuner's ``TrialObserver``: live progress, early stopping and screening against the
incumbent, and turning SIGINT/SIGTERM/SIGHUP into a clean teardown of the running trial.

Screening (``stop.screen_steps`` > 0) is a two-rung successive-halving rule decided inside the
running trial: after the warm-up and ``screen_steps`` measured steps, a trial whose throughput does
not clear the bar (``screening.IncumbentBar``: the incumbent's throughput as the study's model
estimates it, less a reach that follows the noise) is stopped; one within reach runs every measured
step. The trial is not restarted, so screening costs no second start-up; its steps are read as a
finished trial's, stragglers left out (``stragglers``). The early stop holds the trial against the
same estimate of the incumbent (each warm-up step against its warm-up;
the measured steps so far, stragglers left out, against its throughput) and stops a trial that ran
below ``early_stop_ratio`` of it."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from nccl_tune.launchers.base import STOP_SIGNALS, TrialObserver, TrialProgress
from nccl_tune.stragglers import steady_mean_s, stragglers
from nccl_tune.trial import StopReason, TrialSpec
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.screening import IncumbentBar


class InterruptFlag:
    """Set by a stop signal (``STOP_SIGNALS``: SIGINT, SIGTERM, SIGHUP) while installed; the loop and
    the observer poll it."""

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

    def __enter__(self) -> InterruptFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def step_words(n: int, warmup: int, total: int) -> str:
    """Step ``n`` (1-based) as the live line counts it: its warm-up or measured step of how many,
    and a step the trainer ran past the last measured one while it was being stopped."""
    if n <= warmup:
        return f"warm-up step {n}/{warmup}"
    if n <= total:
        return f"measured step {n - warmup}/{total - warmup}"
    return f"step {n}: all {total - warmup} measured, stopping"


class TunerObserver(TrialObserver):
    """Progress to the display; stop on interrupt or when clearly slower than the incumbent."""

    def __init__(
        self,
        display: Display,
        interrupt: InterruptFlag,
        bar: IncumbentBar | None,
        early_stop_ratio: float,
        screening: bool = False,
    ) -> None:
        """``bar``: the incumbent as the study's model estimates it (None: no incumbent yet), what
        the early stop holds each measured step against and, with ``screening``, the bar a screened
        trial must clear."""
        self.display = display
        self.interrupt = interrupt
        self.early_stop_ratio = early_stop_ratio
        self.bar = bar
        self.screening = screening
        self.why: str | None = None
        """Why the last early stop was asked for (``stop_detail``)."""

    def on_phase(self, spec: TrialSpec, phase: str, seconds: float) -> None:
        self.display.progress(f"{phase} done in {seconds:.1f}s")

    def on_stopping(self, spec: TrialSpec, reason: StopReason, detail: str) -> None:
        """Say, before an interrupted trial's teardown, what it waits for: a trainer that ignores
        SIGTERM holds the tuner for the whole grace period, and more Ctrl-C cannot shorten it."""
        if reason is StopReason.INTERRUPTED:
            self.display.note(
                f"{self.interrupt.signal_name or 'interrupted'}: stopping trial {spec.number}: SIGTERM to its "
                f"processes, SIGKILL to what is left after {spec.clocks.grace_s:g}s (--grace); the next run of the "
                "study runs it again"
            )

    def on_step(self, spec: TrialSpec, step_index: int, seconds: float) -> None:
        self.display.progress(
            f"{step_words(step_index + 1, spec.stop.warmup_steps, spec.stop.total_steps)} in {seconds:.1f}s"
        )

    def slower_than_incumbent(self, spec: TrialSpec, step_times_s: tuple[float, ...]) -> str | None:
        """Why the trial is slower than the incumbent, when it ran below ``early_stop_ratio`` of the
        incumbent as modelled: a warm-up step against its same warm-up step, the measured steps so
        far (stragglers left out: one stalled step is no reading of the config) against its
        throughput; else None."""
        if self.bar is None or not self.early_stop_ratio or not spec.samples_per_step:
            return None
        warm, ratio = spec.stop.warmup_steps, self.early_stop_ratio
        for i, t in enumerate(step_times_s[: min(warm, len(self.bar.warmup_per_s))]):
            ref = self.bar.warmup_per_s[i]
            if t > 0 and spec.samples_per_step / t < ratio * ref:
                return (
                    f"step {i + 1} ran at {spec.samples_per_step / t / ref:.0%} of the incumbent's warm-up step "
                    f"{i + 1} ({ref:,.1f} samples/s as modelled; the early stop is below {ratio:.0%})"
                )
        measured = [t for t in step_times_s[warm:] if t > 0]
        if not measured:
            return None
        per_s, ref = spec.samples_per_step / steady_mean_s(measured), self.bar.incumbent_per_s
        if per_s >= ratio * ref:
            return None
        n, left_out = len(measured), len(stragglers(measured))
        which = f"step {warm + 1}" if n == 1 else f"steps {warm + 1}-{warm + n}"
        left = f", {left_out} straggler left out" if left_out else ""
        return (
            f"{which} ran at {per_s / ref:.0%} of the incumbent's throughput ({ref:,.1f} samples/s as "
            f"modelled{left}; the early stop is below {ratio:.0%})"
        )

    def screened_out(self, spec: TrialSpec, step_times_s: tuple[float, ...]) -> str | None:
        """Why the trial is stopped at the screening point, when its screened steps do not clear the
        bar; else None."""
        screen, warm = spec.stop.screen_steps, spec.stop.warmup_steps
        if not screen or not self.screening or self.bar is None or not spec.samples_per_step:
            return None
        if len(step_times_s) != warm + screen:
            return None
        measured = [t for t in step_times_s[warm:] if t > 0]
        if len(measured) < screen:
            return None
        per_s = spec.samples_per_step / steady_mean_s(measured)
        bar = self.bar
        if not bar.stops(per_s):
            return None
        return (
            f"{per_s:,.1f} samples/s over {screen} screened step{'s' if screen > 1 else ''}, under the bar of "
            f"{bar.floor_per_s:,.1f} (the incumbent's {bar.incumbent_per_s:,.1f} as modelled, less "
            f"{bar.reach_frac:.0%})"
        )

    def should_stop(self, spec: TrialSpec, progress: TrialProgress) -> StopReason | None:
        if self.interrupt.is_set:
            return StopReason.INTERRUPTED
        self.why = self.slower_than_incumbent(spec, progress.step_times_s) or self.screened_out(
            spec, progress.step_times_s
        )
        return StopReason.EARLY_STOP if self.why else None

    def stop_detail(self) -> str | None:
        return self.why
