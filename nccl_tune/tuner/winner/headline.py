"""The winner's headline as every output says it (the end of ``run``, each report format, the tuned
YAML): whether its runs confirm it, its speed-up over the baseline (``records.speedup``: like for
like, or with the caveat), and, when the training itself is at stake, the best config that keeps the
training as the user runs it next to the fastest that changes it, each with its own speed-up: a
gain that comes from dropping long prompts or from more optimizer updates is a different offer
from one that comes from the same training run faster, and the user chooses between them.

The pair is shown when the winner changes a semantic parameter, or a stable config faster than
the winner does (kept out within the measured noise, or for want of a confirmation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.agreement import agreeing
from nccl_tune.tuner.records.semantics import SemanticChange, semantic_changes, semantic_reference
from nccl_tune.tuner.records.speedup import Speedup, speedup
from nccl_tune.tuner.records.stability import Candidate, candidates, noise_frac, run_key, semantic_count
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.wording import fmt_tput

SPEED_ONLY = "speed only (the training as you run it)"
THE_WINNER = "the winner"
"""The speed-only choice's note where it is the study's winner."""
WITH_TRAINING = "with training changes"


def confirmation_words(c: Candidate) -> str:
    """``confirmed: 2 runs agree within their steps' noise``, or why it is not confirmed."""
    if c.confirmed:
        agree = len(agreeing(c.runs))
        timed = sum(1 for r in c.ok_runs if r.throughput)
        off = f"; {timed - agree} of {timed} runs off" if timed > agree else ""
        return f"confirmed: {agree} runs agree within their steps' noise{off}"
    pair = c.disagreement
    if pair is not None:
        return f"NOT confirmed: {pair.words()}"
    return "not confirmed by a re-run"


@dataclass(frozen=True)
class Choice:
    """One side of the pair: a config, its speed-up, what it changes in the training."""

    label: str
    """``SPEED_ONLY`` or ``WITH_TRAINING``."""
    candidate: Candidate | None
    speedup: Speedup | None
    changes: tuple[SemanticChange, ...]
    note: str
    """Why it stands where it does (the winner; within the noise of it; nothing beat the user's run)."""

    def words(self) -> str:
        """One line: the label, the trial, its throughput and speed-up, its changes, the note."""
        c = self.candidate
        if c is None:
            return f"{self.label}: {self.note}"
        gain = f", {self.speedup.words()}" if self.speedup is not None else ""
        changes = f"; changes {', '.join(map(str, self.changes))}" if self.changes else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.label}: trial {c.first.number}, {fmt_tput(c.throughput, c.throughput_unit)}{gain}{changes}{note}"


def _against_fewer(
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate,
    base_values: Mapping[str, Any] | None,
    flaky: Callable[[Mapping[str, Any]], bool] | None,
) -> str:
    """Why a winner that changes the training won: how far it is ahead of the best stable config
    with fewer training changes, against the measured noise."""
    ref = semantic_reference(space, base_values)
    mine = semantic_count(winner.values, ref)
    fewer = [
        c
        for c in candidates(records)
        if c.stable and semantic_count(c.values, ref) < mine and not (flaky and flaky(c.values))
    ]
    best = max(fewer, key=lambda c: c.throughput, default=None)
    if best is None:
        return "the winner: no stable config changes the training less"
    gain, noise = winner.throughput / best.throughput - 1.0, noise_frac(records)
    how = "beyond" if gain > noise else "within"
    return (
        f"the winner: {gain:+.1%} over trial {best.first.number}, the fastest stable config that changes the "
        f"training less, {how} the measured noise ({noise:.1%})"
    )


def _plain_note(
    speed_only: Candidate,
    base: Candidate | None,
    winner_changes_training: bool,
    flaky: Callable[[Mapping[str, Any]], bool] | None,
) -> str:
    """What the speed-only choice adds: that it is the winner, or whether a re-run confirmed it
    (``confirmation_words``: the winner's line says so of the winner) and, when the user's own config
    ran faster, that it is not stable (the choice is the fastest that is)."""
    if not winner_changes_training:
        return THE_WINNER
    unstable = base is not None and (not base.stable or bool(flaky and flaky(base.values)))
    faster = unstable and base.throughput > speed_only.throughput
    why = "your own config ran faster but is not stable; this is the fastest that is; " if faster else ""
    return why + confirmation_words(speed_only)


def _same(a: Candidate | None, b: Candidate | None) -> bool:
    return a is not None and b is not None and run_key(a.values) == run_key(b.values)


def choices(
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    speed_only: Candidate | None,
    with_training: Candidate | None,
    base: Candidate | None,
    flaky: Callable[[Mapping[str, Any]], bool] | None = None,
) -> tuple[Choice, Choice] | None:
    """The speed-only best and the best with training changes, when the training is at stake (the
    module docstring); None otherwise. ``flaky``: values the study does not call stable however their
    runs went (``failure_model.flaky_rule``)."""
    if winner is None:
        return None
    base_values = base.values if base else None
    mine = tuple(semantic_changes(space, winner.values, base_values))
    training = winner if mine else with_training
    if training is None or (not mine and training.throughput <= winner.throughput):
        return None
    if speed_only is None:
        plain = Choice(SPEED_ONLY, None, None, (), "no stable config keeps the training as you run it")
    elif _same(speed_only, base):
        plain = Choice(
            SPEED_ONLY, speed_only, None, (), "your own run: no config beat it without changing the training"
        )
    else:
        plain = Choice(
            SPEED_ONLY, speed_only, speedup(speed_only, base), (), _plain_note(speed_only, base, mine, flaky)
        )
    if mine:
        note = _against_fewer(space, records, winner, base_values, flaky)
    else:
        noise = noise_frac(records)
        gain = training.throughput / winner.throughput - 1.0
        note = (
            f"{gain:+.1%} over the winner, within the measured noise ({noise:.1%}): not worth changing the training"
            if gain <= noise
            else f"{gain:+.1%} over the winner, not chosen: {confirmation_words(training)}"
        )
    changed = Choice(
        WITH_TRAINING,
        training,
        speedup(training, base),
        tuple(semantic_changes(space, training.values, base_values)),
        note,
    )
    return plain, changed
