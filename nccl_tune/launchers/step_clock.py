"""Timing step lines that carry no duration of their own, when their output came late.

A step line without a duration is timed by the wall clock between step lines. That holds only
while each line arrives when it was written. A command whose stdout is block-buffered in a pipe
(a Python trainer without ``PYTHONUNBUFFERED`` or ``-u``, a C program's stdio) hands its lines
over in bursts, all of them at exit at worst: lines read from one chunk of the pipe share one
arrival time, and the wall clock gives the first of them the time of many steps and the others
none. Such lines are still steps. Once bursts are the rule (``MIN_LATE_LINES`` step lines or more
arrived together with the one before, and at least half of those after the first did: a progress
bar's redraws now and then share a read of the pipe, a buffered command's nearly all do) the wall
clock times none of the trial's steps: each step is timed by the timestamps its line and the
previous step's line carry (loguru's, ``logging``'s, glog's, ISO 8601), and a step without
both is *untimed* (its duration reads 0 and the trial's throughput is unknown unless its lines
printed a rate). A step whose own line gave its duration is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

_STAMP = re.compile(
    r"(?:(?P<y>\d{4})[-/])?(?P<mo>\d{2})[-/](?P<d>\d{2})[ T]"
    r"(?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:[.,](?P<f>\d{1,9}))?"
    r"|\b[IWEF](?P<gmo>\d{2})(?P<gd>\d{2}) (?P<gh>\d{2}):(?P<gmi>\d{2}):(?P<gs>\d{2})(?:\.(?P<gf>\d{1,9}))?"
    r"|(?<![\d:])(?P<th>\d{2}):(?P<tmi>\d{2}):(?P<ts>\d{2})[.,](?P<tf>\d{3,9})"
)
"""A date and time (``2026-08-01 12:34:56.789``, ``2026-08-01T12:34:56,789``, ``08-01 12:34:56``),
glog's ``I0801 12:34:56.789012``, or a time of day with a fraction (``12:34:56.789``)."""
STAMP_SEARCH_CHARS = 200
"""A timestamp is looked for in a line's first characters only (where loggers put it)."""
DAY_S = 86400.0
_EPOCH = date(2000, 1, 1).toordinal()
"""Days count from here: seconds since year 1 would lose the milliseconds in a float."""


def line_stamp(text: str) -> float | None:
    """Seconds on the clock ``text``'s own timestamp shows (only differences mean anything), or
    None when its start carries none."""
    m = _STAMP.search(text[:STAMP_SEARCH_CHARS])
    if m is None:
        return None
    g = m.groupdict()
    try:
        if g["h"] is not None:
            day = date(int(g["y"] or 2000), int(g["mo"]), int(g["d"])).toordinal()
            h, mi, s, f = g["h"], g["mi"], g["s"], g["f"]
        elif g["gh"] is not None:
            day = date(2000, int(g["gmo"]), int(g["gd"])).toordinal()
            h, mi, s, f = g["gh"], g["gmi"], g["gs"], g["gf"]
        else:
            day, h, mi, s, f = None, g["th"], g["tmi"], g["ts"], g["tf"]
    except ValueError:  # not a date (13th month, 31st of February)
        return None
    seconds = int(h) * 3600 + int(mi) * 60 + int(s) + (float(f"0.{f}") if f else 0.0)
    return seconds if day is None else (day - _EPOCH) * DAY_S + seconds


@dataclass(frozen=True)
class _Line:
    index: int
    """The step's index among the trial's steps (warm-up included)."""
    t: float
    """Arrival time."""
    stamp: float | None
    between: int
    """Steps the line advanced by (a line may skip step numbers)."""


@dataclass(frozen=True)
class Retimed:
    step_times_s: tuple[float, ...]
    untimed: tuple[int, ...]
    """Indices of the steps neither their line nor the wall clock could time (duration 0)."""
    late: tuple[int, ...]
    """Indices of the steps whose line arrived together with the previous one (empty: the output
    came as written)."""


MIN_LATE_LINES = 2
"""Step lines arriving together with the one before, at the least, before the output is taken as
buffered (``StepClock.buffered``)."""


class StepClock:
    """The wall-clock-timed step lines of one trial; ``retime`` gives their durations."""

    def __init__(self) -> None:
        self._lines: list[_Line] = []
        self._late: list[int] = []

    def take(self, index: int, t: float, text: str, between: int) -> None:
        """Step ``index``'s line (``text``) arrived at ``t`` without a duration of its own."""
        if self._lines and self._lines[-1].t == t:
            self._late.append(index)
        self._lines.append(_Line(index, t, line_stamp(text), between))

    @property
    def buffered(self) -> bool:
        """The step lines came in bursts as a rule, not by chance (the module docstring)."""
        return len(self._late) >= MIN_LATE_LINES and 2 * len(self._late) >= len(self._lines) - 1

    def retime(self, wall_times_s: Sequence[float]) -> Retimed:
        """``wall_times_s`` (every step's duration, warm-up included, wall-clock ones as measured),
        with the wall-clock ones replaced once the output came in bursts (the module docstring)."""
        if not self.buffered:
            return Retimed(tuple(wall_times_s), (), ())
        out, untimed = list(wall_times_s), []
        prev: float | None = None
        for line in self._lines:  # a line stands for the ``between`` steps since the previous one
            steps = [i for i in range(line.index, line.index + line.between) if i < len(out)]
            if line.stamp is not None and prev is not None and line.stamp >= prev:
                for i in steps:
                    out[i] = (line.stamp - prev) / line.between
            else:
                for i in steps:
                    out[i] = 0.0
                untimed.extend(steps)
            prev = line.stamp
        return Retimed(tuple(out), tuple(untimed), tuple(self._late))
