"""Forced trials: the winner-to-be run once at the longest batch its config allows.

A space that names how to force its trainer's longest batch (``stability.force_worst_case``: for
SkyRL, vLLM's ``min_tokens`` at ``max_generate_length``) gets, after the search, one forced run of
the config that would win with predictions set aside (``winner_to_be``: a forced run overrides a
prediction), and, in a search run in one slot, each
new leader from half the search's trials on (``between``), so that what a forced run rules out
steers the rest of the search (``admission`` launches no config holding at least its memory). Its measured peak is the config's worst case
(``WorstCase.how == "forced"``, over any prediction). A forced run that runs out of memory, or whose
peak leaves less than ``min_headroom_frac`` free, makes the config unstable: the next-best config is
then forced in turn, until one passes, ``FORCED_PER_RUN`` forced runs were spent, the ``--budget``
deadline passed or the run was interrupted (the next run resumes: a config already forced is never
forced again). A forced run's throughput is never compared with a normal run's: it counts for no
mean, noise, incumbent or sampler (``TrialRecord.forced``).

A forced run that ran out of memory in a phase its verdict names asks the search for its config
lower on the parameter that moves that phase's peak, by as many halvings as the memory it asked
says (``repaired``: to the lowest value when one halving cannot fit), as the search's next trial:
the search ranks by speed and would not step down by itself. After the search, once no config is
left to force, those configs run all the same (``Scheduler.repair``, on top of ``--trials``, within
the ``--budget``) and are forced in turn: otherwise a run whose every measured config shares the
failed phase's micro-batch would end with none that survives its longest batch. A forced run refused, crashed or failed to start before its first step says that the setting
broke the command, not that the config is unstable (``TrialRecord.forcing_broke``): forcing stops,
with a note, and the winner's worst case stays unproven.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.oom_demand import OomDemand, oom_demand
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.sampling import suggest, to_optuna
from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.search.forced_bound import ForcedFailures, failed_forced
from nccl_tune.tuner.study.budget import Budget, Gate
from nccl_tune.tuner.trials.display import FORCED_KIND, Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from nccl_tune.tuner.trials.trial_run import TrialRunner
from nccl_tune.tuner.winner.study_view import pick_winner

FORCED_PER_RUN = 8
"""Forced runs one ``nccl-tune run`` launches at most: each costs a trial at the longest batches.
The search's own (``between``) take at most half, so that the winner after it can be forced."""


class Forcing:
    """The forced runs of one ``nccl-tune run`` (its share, ``FORCED_PER_RUN``, over its calls)."""

    def __init__(self, runner: TrialRunner, budget: Budget, interrupt: InterruptFlag, display: Display) -> None:
        self.runner = runner
        self.budget = budget
        self.interrupt = interrupt
        self.display = display
        self.left = FORCED_PER_RUN if runner.space.force_worst_case and runner.settings.force_worst_case else 0
        self.stopped = False
        """True once a forced run showed that the setting breaks the command."""
        self.launched = 0
        """Forced runs launched by this run (they do not count as search trials)."""
        self.repairs: list[tuple[dict[str, Any], str]] = []
        """Configs (and why) the search is to try next (``repair``), handed over by ``next_repair``."""

    def between(self, study: optuna.Study) -> bool:
        """During the search (one slot): force the leader once, if it was not; True when interrupted.
        What a forced run rules out (``ForcedFailures``) then steers the rest of the search."""
        if self.left <= FORCED_PER_RUN // 2:
            return False
        return self.run(study, prefer_confirmed=False, once=True)

    def run(self, study: optuna.Study, prefer_confirmed: bool, once: bool = False) -> bool:
        """Force the winner-to-be (and the next-best while a forced run fails, unless ``once``); True
        when interrupted."""
        broke = next((r for r in R.records(study) if r.forcing_broke), None)
        if broke is not None and not self.stopped:
            self.stopped = True
            self.display.note(
                f"trial {broke.number} showed that the space's stability.force_worst_case breaks the command: "
                "no config is forced; fix the setting"
            )
        while self.left > 0 and not self.stopped:
            history = R.records(study)
            lead = winner_to_be(history, self.runner.space, prefer_confirmed)
            if lead is None or lead.forced_run is not None:
                return False
            skipped = f"trial {lead.first.number} is not forced to its longest batch"
            gate = self.budget.gate(self.interrupt, self.display, skipped)
            if gate is not Gate.GO:
                return gate is Gate.INTERRUPTED
            self.left -= 1
            self.launched += 1
            result = self.force(study, lead, history)
            if result.status is FailureClass.INTERRUPTED:
                return True
            run = self.tell(study, lead)
            self.budget.observe(result, forced=True, unstable=run is not None and failed_forced(run))
            if once:
                return False
        return False

    def force(self, study: optuna.Study, lead: Candidate, history: list[TrialRecord]) -> TrialResult:
        """One forced run of ``lead``'s values, told to the study."""
        space, pinned = self.runner.space, self.runner.held.params
        study.enqueue_trial(
            to_optuna(space, lead.values, pinned),
            user_attrs={R.A_KIND: TrialKind.FORCED.value, R.A_RERUN_OF: lead.first.number},
        )
        trial = self.runner.ask(study)
        with self.runner.told_on_failure(study, trial):
            values = suggest(trial, space, pinned)
            trial.set_user_attr(R.A_VALUES, values)
            kind = f"{FORCED_KIND} to its longest batch: trial {lead.first.number}'s values"
            return self.runner.run(study, trial, values, kind, history, early_stop=False, forced=True)

    def tell(self, study: optuna.Study, lead: Candidate) -> TrialRecord | None:
        """What the forced run of ``lead`` showed, in a line; that run, as stored (None: none is)."""
        records = R.records(study)
        run = next((r for r in reversed(records) if r.forced and r.rerun_of == lead.first.number), None)
        if run is None:
            return None
        if run.forcing_broke:
            self.stopped = True
            why = run.result.verdict.evidence[0].text if run.result and run.result.verdict.evidence else ""
            self.display.note(
                f"the space's stability.force_worst_case broke the command (trial {run.number} "
                f"{run.status.value if run.status else 'failed'} before its first step{': ' + why if why else ''}): "
                "no config is forced; fix the setting (nccl-tune spaces show SPACE --yaml)"
            )
            return run
        w = run.worst_case
        if run.ok and not run.near_wall and not run.worst_unfit:
            peak = f" peaked at {w.peak_frac:.0%} of the GPU" if w is not None else " measured no memory"
            self.display.note(f"trial {lead.first.number} forced to its longest batch (trial {run.number}):{peak}")
            return run
        what = (
            f"ended {run.status.value if run.status else 'failed'}"
            if not run.ok
            else "came within the headroom of the memory wall"
        )
        self.repair(study, run)
        nxt = winner_to_be(records, self.runner.space, False)
        then = f"; trial {nxt.first.number} is next" if nxt is not None else "; no other config is stable"
        self.display.note(
            f"trial {lead.first.number} forced to its longest batch (trial {run.number}) {what}: not stable{then}"
        )
        return run

    def repair(self, study: optuna.Study, run: TrialRecord) -> None:
        """Ask the search for the config of ``run`` (a forced run that ran out of memory in a phase)
        lower on the parameter that moves that phase's peak (``repaired``), as its next trial: the
        search's models rank by speed and would not step down by themselves. After the search it
        runs once no config is left to force (``Scheduler.repair``)."""
        values = repaired(self.runner.space, run, self.runner.held.params)
        if values is None or ForcedFailures(self.runner.space, R.records(study)).covering(values) is not None:
            return
        name, old, new = next((k, run.values[k], v) for k, v in values.items() if run.values.get(k) != v)
        why = (
            f"forced, trial {run.number} ran out of memory in {run.result.verdict.phase}: {name} "
            f"{format_value(old)} -> {format_value(new)}"
        )
        self.repairs.append((values, why))

    def winner_to_be(self, study: optuna.Study) -> Candidate | None:
        """The config this run would force next (``winner_to_be``), confirmed or not."""
        return winner_to_be(R.records(study), self.runner.space, False)

    def next_repair(self, study: optuna.Study) -> None:
        """Queue the first config ``repair`` asked for as the study's next trial (the scheduler calls
        it right before it asks: a queued trial goes to whoever asks first)."""
        if not self.repairs:
            return
        values, why = self.repairs.pop(0)
        study.enqueue_trial(
            to_optuna(self.runner.space, values, self.runner.held.params),
            user_attrs={R.A_KIND: TrialKind.SEARCH.value, R.A_WHY: why},
        )


def winner_to_be(records: list[TrialRecord], space: SearchSpace, prefer_confirmed: bool) -> Candidate | None:
    """The config to force next: the winner once predictions are set aside (a forced run overrides
    a prediction, so a config ruled out by its predicted worst case alone may still win forced)."""
    plain = [r if r.forced else replace(r, worst_case=None) for r in records]
    return pick_winner(plain, space, prefer_confirmed=prefer_confirmed, failing_worst=False)


def repair_halvings(demand: OomDemand | None) -> int:
    """Halvings of a power-of-two parameter that ``repaired`` takes for an OOM's ``demand``."""
    if demand is None or demand.needed_frac <= 1:
        return 1
    over = demand.needed_gib - demand.capacity_gib
    if demand.tried_gib > 0:
        if demand.tried_gib <= over:
            return 64  # past every value: the lowest is tried first
        return max(1, math.ceil(math.log2(demand.tried_gib / (demand.tried_gib - over))))
    return max(1, math.ceil(math.log2(demand.needed_frac)))


def repaired(space: SearchSpace, run: TrialRecord, pinned: Mapping[str, Any]) -> dict[str, Any] | None:
    """``run``'s values with the first free parameter that names the phase its OOM named
    (``Parameter.phases``) lowered toward less memory, within the space's rules: by as many steps
    as the OOM's demand (in use plus asked, ``oom_demand``) is over the GPU, a step halving a
    power of two (at least one step); None when its verdict names no phase or no step is left.
    When the OOM says how much it asked (``tried_gib``, the allocation of one micro-batch's tensors,
    which halves with the micro-batch), by as many halvings as bring that allocation under what is
    to be shed (the demand over the GPU); straight to the lowest value when the allocation is no
    more than that: a forced OOM asking more than the GPU's free memory is not one step from fitting."""
    phase = run.result.verdict.phase if run.result is not None and run.status is FailureClass.OOM else None
    if not phase:
        return None
    steps = repair_halvings(oom_demand(e.text for e in run.result.verdict.evidence))
    for p in space.free(pinned):
        if phase not in p.phases or not p.memory.signed or p.name not in run.values:
            continue
        rank = p.memory_rank(run.values[p.name])
        lower = sorted((c for c in p.choices if p.memory_rank(c) < rank), key=p.memory_rank, reverse=True)
        for value in lower[steps - 1 :] + lower[: steps - 1][::-1]:
            values = {**run.values, p.name: value}
            if not space.violations(values):
                return values
    return None
