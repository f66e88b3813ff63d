"""Which config is the fastest *stable* one.

Stable means: every launched run of those values finished its measured steps (status ``ok``),
none of them came within ``min_headroom_frac`` of the memory wall, and (when re-runs were
asked for) it did so at least twice, the runs agreeing within their own noise (``agreement``: two
runs further apart than their steps' scatter allows are no confirmation), and it holds no value (or
pair of values) that the study has
seen make other runs hang or crash after they started (``failure_model.flaky_rule``, where the
callers pass it): a config that passed its own short runs while its NCCL setting hung half the
runs of others was lucky, not stable. Throughput is the mean over its runs.

A config that changes the training itself (a ``semantic`` parameter away from the user's own
value) wins only by more than the measured noise: of the stable configs (confirmed or not) within
``noise_frac`` of the fastest, the one that changes the fewest semantic parameters wins (the fastest
of those; with confirmation required, a confirmed one before one that is not, and when the one
kept is not confirmed, no confirmed winner). ``noise_frac`` is the largest run-to-run spread,
(max - min) / mean, of any candidate run more than once in the study (at least ``MIN_NOISE_FRAC``);
until ``MIN_REPEATED`` candidates have been repeated it is at least ``DEFAULT_NOISE_FRAC``: one pair
of runs that happened to agree says little of the noise. ``speed_only`` is the same choice among the
configs that change no semantic parameter: what the study found without touching the training.

Likewise an environment variable set wins only if it pays: when a stable candidate is the winner
with one or more of its environment variables (``target: env``: NCCL's, above all) back as the
user's own run has them (the baseline's values), every other value the same, and is within
``noise_frac`` of it, the one of those with the fewest variables set wins. A variable whose gain the
study cannot tell from the noise is left as the user runs it today: each one set is one more thing
that can hang at scale or change under the next NCCL release, and a config that passed its short
runs with it has not shown that it is safe. The confirmation re-runs start with the candidate these
rules would pick, so that a config kept for being within the noise gets confirmed too.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from nccl_tune.node.nccl_clamps import effective
from nccl_tune.tuner.records.agreement import Pair, agreeing, worst_pair
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.records.worst_case import WorstCase

DEFAULT_NOISE_FRAC = 0.03
"""Run-to-run noise assumed before any config has been run twice."""
MIN_NOISE_FRAC = 0.01
"""The least noise assumed once measured (a few repeats that agree do not prove a 0.1% gain)."""
MIN_REPEATED = 2
"""Candidates that must have been repeated before their spreads alone set the noise (below it, the
noise is at least ``DEFAULT_NOISE_FRAC``)."""


def values_key(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def run_key(values: Mapping[str, Any]) -> str:
    """``values_key`` of the run ``values`` make: configs that NCCL runs alike (a setting past one of
    its limits, which it clamps: ``node.nccl_clamps``) share it."""
    return values_key(effective(values))


@dataclass(frozen=True)
class Candidate:
    values: Mapping[str, Any]
    runs: tuple[TrialRecord, ...]
    """Every launched run of these values (any status)."""

    @property
    def ok_runs(self) -> tuple[TrialRecord, ...]:
        """Its ``ok`` runs made the normal way: what its throughput, spread and confirmation read. A
        forced run (``TrialRecord.forced``) counts for memory and failure only."""
        return tuple(r for r in self.runs if r.ok and not r.forced)

    @property
    def forced_run(self) -> TrialRecord | None:
        """Its run forced to the longest batch its config allows, if it had one."""
        return next((r for r in self.runs if r.forced), None)

    @property
    def all_ok(self) -> bool:
        return bool(self.runs) and all(r.ok for r in self.runs)

    @property
    def near_wall(self) -> bool:
        return any(r.near_wall for r in self.runs)

    @cached_property
    def confirmed(self) -> bool:
        """Run twice or more, ``ok``, and more than half of its runs agree within their own noise
        (``agreement.agreeing``)."""
        return bool(agreeing(self.runs))

    @property
    def disagreement(self) -> Pair | None:
        """The pair of its runs furthest apart for their noise, when its runs do not confirm it
        (two ``ok`` runs or more that do not agree); None otherwise."""
        return None if self.confirmed else worst_pair(self.runs)

    @property
    def worst_unfit(self) -> bool:
        """A run's worst case (the longest batch the config allows) does not fit its headroom; a
        forced run's, when it has one, over any prediction."""
        forced = [r for r in self.runs if r.forced and r.worst_case is not None]
        return any(r.worst_unfit for r in (forced or self.runs))

    @property
    def worst_case(self) -> WorstCase | None:
        """The highest worst case over its runs (by the upper bound), forced before predicted."""
        cases = [r.worst_case for r in self.runs if r.worst_case is not None]
        return max(cases, key=lambda w: (w.how == "forced", w.upper_frac), default=None)

    @property
    def stable(self) -> bool:
        """Every run ``ok`` away from the memory wall, with a throughput measured (a config whose runs
        could not be timed, block-buffered output with no time of its own, is never ranked), and its
        worst batch fits."""
        return self.all_ok and not self.near_wall and self.throughput > 0 and not self.worst_unfit

    @property
    def throughput(self) -> float:
        vals = [r.throughput for r in self.ok_runs if r.throughput]
        return statistics.fmean(vals) if vals else 0.0

    @property
    def throughput_unit(self) -> str | None:
        """The unit of ``throughput`` (``samples/s``, ``tokens/s``, ``steps/s``)."""
        return next((r.throughput_unit for r in self.ok_runs if r.throughput), None)

    @property
    def throughput_spread(self) -> float:
        """(max - min) / mean of the runs' throughput: how repeatable it is."""
        vals = [r.throughput for r in self.ok_runs if r.throughput]
        if len(vals) < 2 or not statistics.fmean(vals):
            return 0.0
        return (max(vals) - min(vals)) / statistics.fmean(vals)

    @property
    def peak_mem_gib(self) -> float | None:
        peaks = [r.peak_mem_gib for r in self.runs if r.peak_mem_gib is not None]
        return max(peaks) if peaks else None

    @property
    def min_headroom_gib(self) -> float | None:
        rooms = [r.result.memory.min_headroom_gib for r in self.runs if r.result and r.result.memory]
        rooms = [x for x in rooms if x is not None]
        return min(rooms) if rooms else None

    @property
    def first(self) -> TrialRecord:
        return self.runs[0]

    @property
    def is_baseline(self) -> bool:
        return any(r.kind is TrialKind.BASELINE for r in self.runs)


def candidates(records: Iterable[TrialRecord]) -> list[Candidate]:
    """Launched runs grouped by the run their values make (``run_key``: a setting NCCL clamps runs
    as the clamped one), in order of first launch; a group's values are its first run's. Only runs
    whose end says something of their values (``TrialRecord.tells_of_values``) count."""
    groups: dict[str, list[TrialRecord]] = {}
    for r in records:
        if r.tells_of_values:
            groups.setdefault(run_key(r.values), []).append(r)
    return [Candidate(runs[0].values, tuple(runs)) for runs in groups.values()]


Flaky = Callable[[Mapping[str, Any]], bool]
"""True for values that hold a value or pair the study has seen make runs fail after they started
(``failure_model.flaky_rule``): such a config is not stable however its own runs went."""


def _stable(records: Iterable[TrialRecord], flaky: Flaky | None) -> list[Candidate]:
    return [c for c in candidates(records) if c.stable and not (flaky and flaky(c.values))]


def to_confirm(
    records: Iterable[TrialRecord],
    n: int,
    semantic_ref: Mapping[str, Any] | None = None,
    flaky: Flaky | None = None,
    env_ref: Mapping[str, Any] | None = None,
) -> list[Candidate]:
    """The ``n`` stable candidates that have run only once to re-run first: the one
    ``select_winner`` would pick without confirmation, then the fastest faster than every
    confirmed one."""
    recs = list(records)
    stable = _stable(recs, flaky)
    pool = [c for c in stable if not c.confirmed]
    confirmed_best = max((c.throughput for c in stable if c.confirmed), default=0.0)
    order = sorted((c for c in pool if c.throughput > confirmed_best), key=lambda c: c.throughput, reverse=True)
    lead = select_winner(recs, require_confirmation=False, semantic_ref=semantic_ref, flaky=flaky, env_ref=env_ref)
    if lead is not None and not lead.confirmed:
        order = [lead] + [c for c in order if run_key(c.values) != run_key(lead.values)]
    return order[:n]


def faster_passed_over(
    passed: Iterable[tuple[Candidate, str]], winner: Candidate | None
) -> list[tuple[Candidate, str]]:
    """Those of ``passed`` (configs left out as ``flaky``, with why) faster than ``winner``: the ones a
    reader asks about."""
    floor = winner.throughput if winner is not None else 0.0
    return [(c, why) for c, why in passed if c.throughput > floor]


def noise_frac(records: Iterable[TrialRecord]) -> float:
    """The study's measured run-to-run noise: the largest throughput spread of a candidate with
    two ``ok`` runs or more, at least ``MIN_NOISE_FRAC``; at least ``DEFAULT_NOISE_FRAC`` while fewer
    than ``MIN_REPEATED`` candidates have been repeated."""
    spreads = [c.throughput_spread for c in candidates(records) if len(c.ok_runs) >= 2]
    floor = MIN_NOISE_FRAC if len(spreads) >= MIN_REPEATED else DEFAULT_NOISE_FRAC
    return max([floor, *spreads])


def changes_semantics(c: Candidate, semantic_ref: Mapping[str, Any]) -> bool:
    """True when ``c`` sets a semantic parameter away from its value in ``semantic_ref``."""
    return not keeps_semantics(c.values, semantic_ref)


def keeps_semantics(values: Mapping[str, Any], semantic_ref: Mapping[str, Any]) -> bool:
    """True when ``values`` keep the training: no semantic parameter away from its value in ``semantic_ref``."""
    return semantic_count(values, semantic_ref) == 0


def semantic_count(values: Mapping[str, Any], semantic_ref: Mapping[str, Any]) -> int:
    """How many semantic parameters ``values`` sets away from their value in ``semantic_ref``."""
    return sum(k in values and values[k] != v for k, v in semantic_ref.items())


def fewest_training_changes(
    best: Candidate, stable: Iterable[Candidate], semantic_ref: Mapping[str, Any], noise: float, confirmed_first: bool
) -> Candidate:
    """Of ``stable`` within ``noise`` of ``best`` (``best`` among them), the one that changes the
    fewest semantic parameters; the fastest of those (a confirmed one first when ``confirmed_first``)."""
    rivals = [c for c in stable if best.throughput <= c.throughput * (1.0 + noise)] or [best]
    return min(
        rivals,
        key=lambda c: (semantic_count(c.values, semantic_ref), confirmed_first and not c.confirmed, -c.throughput),
    )


def changes(values: Mapping[str, Any], env_ref: Mapping[str, Any]) -> dict[str, Any]:
    """The environment variables ``values`` sets away from the user's own run (``env_ref``: each
    variable -> its value there)."""
    return {k: v for k, v in values.items() if k in env_ref and env_ref[k] != v}


def undoes_some_of(simpler: Candidate, c: Candidate, env_ref: Mapping[str, Any]) -> bool:
    """True when ``simpler`` is ``c`` with one or more of its environment variables back as the
    user's run has them, every other value the same."""
    if any(simpler.values.get(k) != v for k, v in c.values.items() if k not in env_ref):
        return False
    mine, theirs = changes(simpler.values, env_ref), changes(c.values, env_ref)
    return len(mine) < len(theirs) and all(theirs.get(k) == v for k, v in mine.items())


def does_not_pay(simpler: Candidate, c: Candidate, env_ref: Mapping[str, Any], noise: float) -> bool:
    """True when ``c`` is ``simpler`` with more environment variables set (``undoes_some_of``) and is
    no more than ``noise`` faster: what it sets does not pay."""
    return undoes_some_of(simpler, c, env_ref) and c.throughput <= simpler.throughput * (1.0 + noise)


def select_winner(
    records: Iterable[TrialRecord],
    require_confirmation: bool,
    semantic_ref: Mapping[str, Any] | None = None,
    flaky: Flaky | None = None,
    env_ref: Mapping[str, Any] | None = None,
) -> Candidate | None:
    """The fastest stable candidate (confirmed by a re-run when ``require_confirmation``; not
    ``flaky``); with ``semantic_ref`` (semantic parameter -> the user's value), one that changes the
    training wins only by more than ``noise_frac``; with ``env_ref`` (each environment variable ->
    the user's value), so does a variable set (see the module docstring)."""
    recs = list(records)
    stable = _stable(recs, flaky)
    pool = [c for c in stable if not require_confirmation or c.confirmed]
    best = max(pool, key=lambda c: c.throughput, default=None)
    if best is None or not (semantic_ref or env_ref):
        return best  # the screening incumbent, asked at every trial: no rule, no noise to read
    noise = noise_frac(recs)
    if semantic_ref and changes_semantics(best, semantic_ref):
        best = fewest_training_changes(best, stable, semantic_ref, noise, require_confirmation)
        if require_confirmation and not best.confirmed:
            return None  # kept within the noise, not yet confirmed: the unconfirmed pick says so
    if not env_ref:
        return best
    simpler = [c for c in pool if does_not_pay(c, best, env_ref, noise)]
    return min(simpler, key=lambda c: (len(changes(c.values, env_ref)), -c.throughput), default=best)


def speed_only(
    records: Iterable[TrialRecord],
    require_confirmation: bool,
    semantic_ref: Mapping[str, Any],
    flaky: Flaky | None = None,
    env_ref: Mapping[str, Any] | None = None,
) -> Candidate | None:
    """``select_winner`` among the configs that keep every semantic parameter as ``semantic_ref``
    has it: the best the study found without changing the training."""

    def left_out(values: Mapping[str, Any]) -> bool:
        return semantic_count(values, semantic_ref) > 0 or bool(flaky and flaky(values))

    return select_winner(records, require_confirmation, semantic_ref, left_out, env_ref)


def faster_unfit(records: Iterable[TrialRecord], winner: Candidate | None) -> list[Candidate]:
    """Candidates faster than ``winner`` whose runs all finished within the headroom but whose worst
    case does not fit: the configs a short trial would have called stable, fastest first."""
    floor = winner.throughput if winner is not None else 0.0
    out = [c for c in candidates(records) if c.all_ok and not c.near_wall and c.worst_unfit and c.throughput > floor]
    return sorted(out, key=lambda c: c.throughput, reverse=True)


def baseline(records: Iterable[TrialRecord]) -> Candidate | None:
    return next((c for c in candidates(records) if c.is_baseline), None)
