"""The default sampler: a memory-aware local search, moves ranked by expected gain.

On a training node the fastest stable configs sit next to the memory wall and most of the space is
slower or failing, so a few dozen trials are better spent moving from the best config found so far
than modelling the whole space. Every proposal is rebuilt from the study's storage (a resumed study
proposes what an uninterrupted one would):

1. Models: ``throughput_model`` (log throughput, additive over the parameters, with each
   parameter's scale learnt from the study's own one-parameter differences), ``memory_model``
   (peak per GPU, monotone in the parameters declared ``memory: increasing/decreasing``) and
   ``failure_model`` (which values, alone or in pairs, make runs hang, crash or be refused, and
   what those failures cost).
2. The incumbent: the stable config (every run ``ok``, away from the wall, no flaky value:
   ``FailureModel.flaky``) of highest modelled throughput; noise within a run or between runs does
   not move it, since the model pools them.
3. Moves from the best finished configs (stable ones, and ones too close to the memory wall to be
   stable: a step back from the wall may be the best config): every one-parameter change (along an
   ordered axis up to two values away: a gain often goes on), and
   compound moves where a memory-increasing change would not fit on its own: that change together
   with an enabler (a memory-decreasing change of another parameter: checkpointing on, a higher
   ZeRO stage, offload on, a shorter sequence). While no enabler's effect on memory is measured,
   each is paired with the smallest change that needs it; once one is measured, the measured ones
   are paired with any change the memory model predicts will fit, so the largest that fits wins
   on expected gain (untried enablers wait: each costs an OOM when it frees too little). An enabler is then not
   tried alone until a run holding it measured its throughput (slower at the same micro-batch, it
   would never pay off at once), unless the trend its parameter measured so far rates it faster
   than the base (a shorter sequence, after the longer ones measured slower). A jump: the
   config the throughput model rates best near the base, over values already measured (gains
   measured one at a time, combined in one trial). A pair of moves, from the leading config: two
   one-parameter moves of different parameters in one trial, each change either not rated slower
   than that config or back to the baseline's value, and two that each take memory only where the
   two are likely to fit together (``Planner.pairs``); an untried pair, a change that takes memory
   and that the model rates slower, with a micro-batch along its axis, one run on each side of the
   base's micro-batch (``Planner.micro_batch_pairs``). And a move without a
   partner: a value whose failures were cheap (start-up crashes) and all came next to the same
   other values, from a base that holds those values, together with all of them set back to the
   baseline's at once (a shorter prompt limit crashed at the incumbent's larger batch; from there
   no single change tries it at the smaller one, and one trial tells the value from all of them).
   And a pair that may interact, from the leading config: NCCL's protocol with a gradient
   bucket size (``nccl_interactions``): Simple with larger buckets, until a run has held the two
   together (``Planner.interactions``).
4. Each move is scored ``expected improvement x P(fits in memory) x worth``: expected
   improvement over the incumbent under the throughput model (a pair that may interact is taken
   as likely as not to beat it, within the spread the model gives the pair: the additive model
   rates it by its parts, which may each lose alone; an untried pair's spread is widened by what
   the two may do together, ``INTERACTION_SD`` per position its micro-batch goes; parameters
   whose measured effect is within noise promise little and wait; untried values of parameters
   with a large measured spread come first); ``P(fits)`` from the memory model (the odds a proposal shows are those shifted by
   how the model's odds held on the study's earlier proposals, ``fit_odds``; the ranking weighs the
   model's own, on which its trade of gain against risk was measured); ``worth`` from the failure
   model: the chance the
   run and its confirmation re-run finish, per trial the failures it risks would cost (a hang its
   stall timeout, any failure at least the trial it uses). A move likelier to fail than to finish
   (``FailureModel.p_ok`` below even) waits while a move likely to finish is worth a trial: its
   promise is the prior spread of an effect its failures never measure, so NVLS without cuMem,
   hung once, would otherwise be tried again from each new base once the other moves promise
   little. A move whose expected failed seconds the study's failure budget cannot take waits
   while one it can take is worth a trial (``failure_budget``: failed runs may take
   ``FAILED_SHARE`` of the GPU time the run plans; TPE's draws are held to it too). Configs the
   admission rule would refuse
   (predicted OOM or within the headroom), configs already tried and configs holding a flaky value
   or pair (``FailureModel.flaky``: the incumbent and the export pass such a config over, however
   its run goes) are never proposed. Among configs tied with the best (its modelled lead over them
   within the standard deviation of the modelled difference: what the study's runs can tell
   apart), moves start from the one with fewest changes from the baseline: a change that did not
   measurably help is not carried along (it may break in combination).
5. Without a stable config yet, moves from the launched configs are ranked by
   ``P(fits) x worth x expected throughput``. When no move is worth
   ``MIN_EXPECTED_GAIN`` and the leading config changes a semantic parameter (a shorter sequence,
   a smaller batch), the same ranking runs among the configs that keep every semantic parameter at
   the user's value, against the fastest of them (``Planner.speed_only_move``): the report shows
   that config next to the winner, and the study's last trials tune it rather than draw blind.
   Where none of them ran stable (the user's own config ran out of memory), the leading configs
   with the training set back join those moves (``Planner.training_set_back``), ranked as without
   a stable config: what the study learnt of micro-batches, offload and NCCL is tried on the
   training as the user runs it. Where no search trial has tried such a config by the run's last
   ``LAST_TRIALS`` trials (by ``--trials``, or by the time ``--budget`` leaves where that ends the
   run first), one goes to it first, however well other moves promise
   (``Planner.speed_only_unanswered``): otherwise the report's speed-only answer stays empty.
   When that promises nothing either, Optuna's TPE proposes (the first of its proposals the memory model
   gives an even chance to fit and the failure model an even chance to finish: ``TPE_DRAWS``; a
   value the command refused is not drawn again where it was refused), and the trial says why the
   planner declined and what the models predict of the draw, as a move's why-line does. When none
   of TPE's draws is, and the likeliest of them is likelier to fail than to finish or is beyond
   the failure budget (near the end of a study the configs it favours fail; the budget spent,
   its draws next to the wall are beyond it), the planner's best move that is likely to fit and
   finish and within the budget goes instead, however little it promises (``Planner.runner_up``):
   a start-up crash tried again next to the values it crashed with costs a trial for nothing,
   and a study that spent its budget would spend it again on TPE's risks where it declined its
   own. In place of a draw merely run before (a duplicate, a trial told for nothing) the move goes
   when it promises ``RUNNER_UP_SHARE`` of a worthy gain. A draw that is only unlikely to fit in
   memory, while the budget may risk it, still goes: it may be the large micro-batch the study
   needs.

Where it is weak. It is a local search, and its models are additive: an interaction between two
parameters is learnt only by trying the pair, which the search does on purpose for NCCL's
protocol and a bucket size, and for a change that takes memory with a micro-batch (any other pair
only when the prior or the parts' own gains bring them together). A phase's memory fit needs runs
that reported memory per phase (GPU samples give it, locally and on Ray nodes; memory lines a
trainer writes to its own worker files, read after the run, give none, so without NVML a SkyRL
run's highest peak is fitted alone), and a memory-saving value whose only runs crashed before
measuring anything keeps its prior effect in every phase. A flat optimum under high step noise
(6-10%) is found late even with more measured steps: one run's reading of a change worth a few percent is a coin toss, and a change
carried in on one run's word is read again only when a later pair undoes it. Where neither NVML
nor the trainer's memory lines give the GPU's size, the memory model has no wall until a run runs
out of memory and PyTorch's message names the size (``gpu_size``): until then the planner weighs
every move at even odds to fit and shows none ("memory not known yet"); where nothing prints memory
at all, what the OOMs' messages said they needed is all it learns, a few failures spend the failure
budget, and TPE's draws, checked against the models, propose the rest. Near a narrow memory wall
it pays a few OOMs to learn where the wall is. NCCL
combinations that hang are learnt by hanging: with the NCCL check, one that deadlocks the
collectives alone costs a check of under a minute, while one that hangs only next to the trainer
(memory pressure, the engines' buffers) costs its trial's stall timeout; and an NCCL value whose
first run hung by the chance of another value may not be tried again when the other NCCL variables
measured flat. A value that hangs now and then is judged by the blame the failure model shares
between it and the other values its failed runs held, so its estimated rate runs low where each
failed run held many changed values (``FailureModel.flaky`` then names them together, at their
joint rate). The figures per landscape family are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from statistics import NormalDist
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, IntDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from nccl_tune.node.nccl_interactions import for_large_messages, interacting_pairs
from nccl_tune.search_spaces.expr import ExprError
from nccl_tune.search_spaces.roles import param_role
from nccl_tune.search_spaces.space import Parameter, SearchSpace, Target
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.nccl_sweep import Sweep
from nccl_tune.tuner.records.nccl_sweep import load as load_sweep
from nccl_tune.tuner.records.sampling import distributions, from_optuna, to_optuna
from nccl_tune.tuner.records.semantics import study_reference
from nccl_tune.tuner.records.stability import candidates, keeps_semantics, run_key
from nccl_tune.tuner.records.study_records import FINISHED, Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.failure_budget import FailureBudget
from nccl_tune.tuner.search.failure_model import FailureModel
from nccl_tune.tuner.search.forced_bound import ForcedFailures
from nccl_tune.tuner.search.memory_effects import learnt_space
from nccl_tune.tuner.search.memory_model import MemoryModel, failure_wall_frac
from nccl_tune.tuner.search.throughput_model import ThroughputModel, axis
from nccl_tune.wording import duration

RUNNER_UP_SHARE = 0.1
"""Share of ``MIN_EXPECTED_GAIN`` that the planner's runner-up (``Planner.runner_up``) must promise
to take the place of a draw TPE drew again: below it, the move is all but sure to be slower, and the
draw goes as before. In place of a draw likely to fail or beyond the failure budget it goes however
little it promises."""
RUNNER_UP_WHY = "it promises little, but TPE drew only configs run before, likely to fail or beyond the failure budget"
"""The why-line's end of the planner's runner-up (``Planner.runner_up``), proposed in place of TPE."""
TPE_DRAWS = 8
"""TPE proposals drawn, where no move is worth a trial, to find one the memory model gives an even
chance to fit."""
MIN_EXPECTED_GAIN = 0.002
"""Expected log-throughput gain below which local moves are not worth a trial (TPE proposes)."""
BASES = 4
"""Finished configs (stable, or near the wall: backing off from the wall is a move too), best
modelled first, whose neighbourhoods are searched."""
PARSIMONY = 0.01
"""Score discount per value changed from the baseline: between moves that promise the same, the one
that keeps more of the user's config."""
LIKELY = 0.5
"""Odds to finish (``FailureModel.p_ok``) below which a config is suspect: not a move base, not a
step of a jump, and as a move it waits while a likely one is worth a trial."""
AXIS_REACH = 2
"""Positions along an ordered axis a one-parameter move may go: a gain often goes on past the next
value (a memory utilization from 0.6 to 0.8, a micro-batch from 2 to 8), and one trial two values
away does what two did one value at a time. Not further: the model's trend gives the far end of an
axis the widest spread, and a study free to go anywhere tried the extremes of every numeric NCCL
variable first (the search benchmark's comm-bound family took 18.5 trials to reach the best, not 11)."""
HOPEFUL_FIT = 0.1
"""Odds to fit in memory at which a compound move holds its enabler back (``Planner.moves``): below
them, for every compound holding it, the enabler moves alone (flash attention, whose compound with
a micro-batch of 16 ran out of memory at ZeRO-2, is not held back for good; it may be faster)."""
SPEED_ONLY_WHY = "no move from the leading config is worth a trial, so this one keeps the training as you run it"
"""What a move ``Planner.speed_only_move`` proposed adds to its why-line: its modelled gain is over
the fastest config that changes no semantic parameter."""
LAST_TRIALS = 2
"""Search trials at the end of a run in which, while no config that keeps the training as the user
runs it is stable and none was tried, one trial goes to it (``Planner.speed_only_unanswered``)."""
LAST_TRIALS_WHY = (
    "no config that keeps the training as you run it ran stable and the run is nearly over, so this one keeps it"
)
"""What a move proposed for the speed-only answer in the run's last trials adds to its why-line."""
INTERACTION_SD = 0.1
"""Prior spread of log throughput that a change made with a micro-batch may add to the sum of their
effects alone, per position the micro-batch goes along its axis (``Planner.micro_batch_pairs``):
packing sequences costs a few percent alone and gains several percent per doubling of the
micro-batch that fills it."""
TIE = 0.01
"""Modelled log-throughput difference within which configs count as tied at least, however well the
study measured them (``Planner.ranked``: the one with fewer changes from the baseline leads)."""
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Move:
    values: Mapping[str, Any]
    changed: tuple[str, ...]
    base: int
    """Trial number of the config it moves from."""
    kind: str = "move"
    """``move`` (one parameter), ``compound move`` (an enabler with a change that needs it), ``jump``
    (the model's best config, several parameters), ``pair of moves`` (two one-parameter moves from
    the leading config), ``move without a partner`` (a value that failed cheaply next to a
    partner, with the partner set back), ``pair that may interact`` (NCCL's protocol with a
    bucket size), ``untried pair`` (a change that takes memory and loses alone, with a
    micro-batch) or ``the training set back`` (a leading config with every semantic parameter at
    the user's value: ``Planner.training_set_back``)."""
    interaction_sd: float = 0.0
    """Log-throughput spread the move may add beyond the sum of its changes' modelled effects (an
    untried pair: ``Planner.micro_batch_pairs``); 0 for a move the additive model rates as it is."""


@dataclass(frozen=True)
class Proposal:
    values: Mapping[str, Any]
    reason: str
    score: float
    fits: float | None = None
    """The memory model's odds that the proposal runs with the headroom free (shifted by the
    study's outcomes: ``fit_odds``); None when nothing measured predicts its peak
    (``MemoryModel.knows``: the planner weighs even odds then, and shows none)."""
    gain_log: float | None = None
    """The modelled change of log throughput over the incumbent."""
    fits_model: float | None = None
    """``fits`` before the study shifted them: what the study checks its odds by."""


def _lead(ranked: Sequence[tuple[float, int, Mapping[str, Any], bool]]) -> tuple[float, int, Mapping[str, Any], bool]:
    """The leading config of ``Planner.ranked``: its first stable row (a config tied with it that
    changes less, say the user's own run near the wall, sorts before it but is no lead), else its first."""
    return next((row for row in ranked if row[3]), ranked[0])


def expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    z = (mean - best) / np.maximum(sd, 1e-12)
    cdf = np.array([_NORMAL.cdf(x) for x in z])
    pdf = np.exp(-0.5 * z**2) / math.sqrt(2 * math.pi)
    return np.maximum((mean - best) * cdf + sd * pdf, 0.0)


class Planner:
    """One proposal from the study's records (the module docstring, steps 1-5)."""

    def __init__(
        self,
        space: SearchSpace,
        pinned: Mapping[str, Any],
        records: Sequence[TrialRecord],
        sweep: Sweep | None = None,
        horizon_trials: int | None = None,
        trials_left: int | None = None,
    ) -> None:
        """``sweep``: what the NCCL sweep timed (``nccl_sweep.load``), if it ran; ``horizon_trials``:
        the launched trials the study is planned to end with (the failure budget's horizon);
        ``trials_left``: the search trials the run plans after this one (None: no plan)."""
        self.trials_left = trials_left
        space = learnt_space(space, records)
        self.space = space
        """The study's space, with the memory effects its runs showed of parameters it left unknown."""
        self.sweep = sweep or Sweep()
        self.pinned = dict(pinned)
        self.records = list(records)
        self.free = space.free(self.pinned)
        self.baseline = space.baseline(self.pinned)
        self.memory = MemoryModel(space, self.records)
        self.forced = ForcedFailures(space, self.records)
        """Forced runs that failed: a config holding at least their memory is no stable one."""
        self.tput = ThroughputModel.of_study(space, self.pinned, self.records, self.sweep.speeds)
        self.tried = {self._key(r.values) for r in self.records if r.values}
        self.failures = FailureModel(
            self.free,
            self.baseline,
            self.records,
            memory_wall_frac=failure_wall_frac(space),
            p_below=self.memory.p_below,
        )
        self.budget = FailureBudget.of_study(self.records, horizon_trials)
        self.interacting = interacting_pairs(self.free)
        """Pairs of free parameters whose effects NCCL's design makes depend on each other."""
        self.declined = ""
        """Why ``propose`` returned None."""
        self.runner_up: Proposal | None = None
        """When ``propose`` returned None: its best move that is likely to fit and finish and within the
        failure budget, though it promises less than ``MIN_EXPECTED_GAIN`` (None: none is)."""
        self.runner_up_promises = False
        """``runner_up`` promises at least ``RUNNER_UP_SHARE`` of ``MIN_EXPECTED_GAIN``."""

    def _key(self, values: Mapping[str, Any]) -> str:
        """The run ``values`` make: their free parameters with the pinned ones (NCCL clamps one
        variable by another's value, pinned or not)."""
        return run_key({**{p.name: values.get(p.name) for p in self.free}, **self.pinned})

    # -- moves -------------------------------------------------------------------------------------
    def full(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return {**values, **self.pinned}

    def singles(self, base: Mapping[str, Any], number: int) -> list[Move]:
        """One parameter changed: along its axis (``throughput_model.axis``) to a value up to
        ``AXIS_REACH`` positions away, or to any value off the axis; from a value off the axis, to
        any other (a longer jump along an axis is a compound move's job)."""
        out = []
        for p in self.free:
            if base.get(p.name) not in p.choices:
                continue
            pos = axis(p)
            here = pos[p.choices.index(base[p.name])]
            for j, c in enumerate(p.choices):
                if c == base[p.name]:
                    continue
                if here is None or pos[j] is None or abs(pos[j] - here) <= AXIS_REACH:
                    out.append(Move(self.full({**base, p.name: c}), (p.name,), number))
        return out

    def compounds(self, base: Mapping[str, Any], number: int) -> list[Move]:
        """A memory-increasing change that does not fit alone (by the memory model's measured
        effects, or because it needs at least the memory of a config that ran out or came too close
        to the wall), with each enabler of another parameter whose memory effect is measured (with
        each of its values), or while none is, with each enabler (with the smallest such change)."""
        signed = [p for p in self.free if p.memory.signed]
        out = []
        for q in signed:
            rank = q.memory_rank(base[q.name])
            ups = sorted((v for v in q.choices if q.memory_rank(v) > rank), key=q.memory_rank)
            needing = [v for v in ups if self.needs_enabler(self.full({**base, q.name: v}), q.name)]
            if not needing:
                continue
            enablers = [
                (e, w)
                for e in signed
                if e is not q
                for w in e.choices
                if e.memory_rank(w) < e.memory_rank(base[e.name])
            ]
            known = [(e, w) for e, w in enablers if self.memory.varies(e.name)]
            for e, w in known or enablers:
                for v in needing if (e, w) in known else needing[:1]:
                    values = self.full({**base, q.name: v, e.name: w})
                    out.append(Move(values, (e.name, q.name), number, kind="compound move"))
        return out

    def without_partner(self, base: Mapping[str, Any], number: int) -> list[Move]:
        """A value that failed cheaply, each time next to the same partners (a shorter prompt limit,
        every start-up of it at a batch larger than the prompts it keeps), with all those partners
        set back to the baseline's values, from a base that holds them all: from there one change
        cannot tell the value from its partners, and this move can at once. A move that set one
        partner back would leave the others, one of which may be the one: the value would crash
        again, and again, one partner cleared each time."""
        out = []
        for (name, value), partners in self.failures.partnered.items():
            if base.get(name) == value or not all(base.get(n) == v for n, v in partners):
                continue
            back = {other: self.baseline[other] for other, _ in partners if other not in self.pinned}
            if back:
                values = self.full({**base, name: value, **back})
                out.append(Move(values, (name, *sorted(back)), number, kind="move without a partner"))
        return out

    def needs_enabler(self, values: Mapping[str, Any], name: str) -> bool:
        """True when ``values`` would not fit by what the study measured (not by the prior alone)."""
        pred = self.memory.predict(values)
        if pred.p_below(self.memory.wall_frac) >= 0.5:
            return False
        return pred.lower_frac > self.memory.wall_frac or self.memory.varies(name)

    def jump(self, base: Mapping[str, Any], number: int) -> list[Move]:
        """The model's best config near ``base``: greedy ascent of the modelled throughput over values
        the study has measured, kept to configs that fit and are not suspect. A multi-parameter
        move: it combines gains measured one at a time in one trial."""
        seen = self.measured
        current = dict(base)
        current_mean = float(self.tput.predict([current])[0][0])
        for _ in range(len(self.free)):
            options = [
                self.full({**current, p.name: v})
                for p in self.free
                for v in p.choices
                if v != current.get(p.name) and (p.name, v) in seen
            ]
            options = [
                o
                for o in options
                if self.within_rules(o)
                and self.memory.p_fits_model(o) >= 0.5
                and self.failures.p_ok(o) >= LIKELY
                and self.memory.verdict(o) is None
            ]
            if not options:
                break
            means, _ = self.tput.predict(options)
            i = int(np.argmax(means))
            if means[i] < current_mean + 0.003:
                break
            current, current_mean = options[i], float(means[i])
        changed = tuple(p.name for p in self.free if current.get(p.name) != base.get(p.name))
        return [Move(current, changed, number, kind="jump")] if len(changed) >= 2 else []

    @cached_property
    def measured(self) -> set[tuple[str, Any]]:
        """(parameter, value) pairs held by a run that measured its throughput (finished, stopped
        early, or failed after some steps: ``speed_measured``): their effect on throughput is
        measured. Read by every base's moves and jump of one proposal; the records do not change
        within it."""
        return {(p.name, o.values.get(p.name)) for o in self.tput.obs for p in self.free}

    def within_rules(self, values: Mapping[str, Any]) -> bool:
        """No rule of the space is broken. An expression that fails on the values leaves them to the
        admission rule, which rejects them and says so (the planner then counts them as tried)."""
        try:
            return not self.space.violations(values)
        except ExprError:
            return True

    def admits(self, values: Mapping[str, Any]) -> bool:
        """Untried, within the space's rules, not refused by the memory model, holding no flaky
        value or pair (the incumbent and the export pass such a config over; a value is flaky only
        once it has taken a whole failure's blame, so one hang by chance does not close it), and not
        the NCCL values of a check that failed in the NCCL sweep, nor holding at least the memory of a
        config that failed forced to its longest batch (``forced_bound``)."""
        return (
            self._key(values) not in self.tried
            and self.within_rules(values)
            and self.memory.verdict(values) is None
            and not self.failures.flaky(values)
            and self.sweep.refused(values) is None
            and self.forced.covering(values) is None
        )

    # -- choosing ------------------------------------------------------------------------------------
    def ranked(self) -> list[tuple[float, int, Mapping[str, Any], bool]]:
        """(modelled log throughput, first trial, values, stable) of every config whose runs all
        finished (stable, or too close to the memory wall to be) and that is not suspect (its values'
        failure rates leave it less than even odds) nor flaky, best first; first of all those tied
        with the best (within ``TIE``, or within one standard deviation of their modelled difference
        from it: a lead one noisy run measured is not one), fewest changes from the baseline first."""
        finished = [
            c
            for c in candidates(self.records)
            if c.all_ok and self.failures.p_ok(c.values) >= LIKELY and not self.failures.flaky(c.values)
        ]
        if not finished:
            return []
        means, _ = self.tput.predict([c.values for c in finished])
        stable = [c.stable and self.forced.covering(c.values) is None for c in finished]
        leader = max(range(len(finished)), key=lambda i: (stable[i], means[i]))
        doubt = self.tput.difference_sd([c.values for c in finished], finished[leader].values)
        rows = [(float(m), c.first.number, c.values, s) for m, c, s in zip(means, finished, stable)]
        tied = {c.first.number for c, m, d in zip(finished, means, doubt) if m >= means[leader] - max(TIE, d)}

        def order(row: tuple[float, int, Mapping[str, Any], bool]) -> tuple[int, int, float]:
            return (0, self.changes(row[2]), -row[0]) if row[1] in tied else (1, 0, -row[0])

        return sorted(rows, key=order)

    def changes(self, values: Mapping[str, Any]) -> int:
        """How many free parameters differ from the baseline."""
        return sum(values.get(p.name) != self.baseline.get(p.name) for p in self.free)

    def moves(self, bases: Sequence[tuple[int, Mapping[str, Any]]]) -> list[Move]:
        """The admissible moves from ``bases`` ((trial number, values) pairs). An enabler that a
        compound move pairs with a change needing it is not tried alone while its effect on
        throughput is unmeasured (slower at the same micro-batch, it would not pay off at once);
        once a run that held it measured its throughput, that effect ranks it like any other move (a
        smaller tensor-parallel size that is also faster). One the model already rates faster than
        the base, from what its parameter measured elsewhere, moves alone too; so does one whose
        every compound move is refused or given under ``HOPEFUL_FIT`` odds to fit: none of them
        will run, and only a run of it alone measures its speed."""
        moves: dict[str, Move] = {}
        measured = self.measured
        for number, values in bases:
            compounds = self.compounds(values, number)
            singles = self.singles(values, number)
            if compounds:
                live = [
                    m for m in compounds if self.admits(m.values) and self.memory.p_fits_model(m.values) >= HOPEFUL_FIT
                ]
                enablers = {(m.changed[0], m.values[m.changed[0]]) for m in live} - measured
                singles = self.without_slower_enablers(values, singles, enablers)
            pairs = (
                self.pairs(values, singles)
                + self.micro_batch_pairs(values, singles)
                + self.interactions(values, number)
                if number == bases[0][0]
                else []
            )
            for m in singles + compounds + self.jump(values, number) + self.without_partner(values, number) + pairs:
                moves.setdefault(self._key(m.values), m)
        return [m for m in moves.values() if self.admits(m.values)]

    def pairs(self, base: Mapping[str, Any], singles: Sequence[Move]) -> list[Move]:
        """Two of ``singles`` (one-parameter moves from ``base``) in one trial: a pair of moves. Under
        the additive model a pair promises the sum of two gains, with both their doubts, and its run
        measures both changes; the model takes each effect from every run that changed it, so the
        runs after it tell the two apart. On a noisy job whose changes gain a few percent each, one
        run then reads two of them. A pair takes only changes the throughput model does not rate
        slower than ``base`` by more than ``TIE`` (by the prior while unmeasured: a larger micro-batch
        or engines' pool, an NCCL value; a smaller one, or an enabler, the prior rates slower): a
        pair's spread made a gain carried with a loss look worth a trial. A change back to the
        baseline's value may join whatever the model says: it undoes a change an earlier run
        carried into ``base`` on the word of one noisy run (a tensor-parallel size of 1, rated
        faster by the prior, measured faster beside a real gain). Never a semantic parameter
        (a batch size or a prompt limit changes the work of a step, which the prior rates neither
        faster nor slower: a pair of them bought doubt, not gain), and never two environment
        variables (NCCL's act on the same collectives and hang in combination: one changes at a
        time, so a hang is blamed on one). A pair of two changes that each take memory is likely
        to fit (``LIKELY``): the two stack their risks, and a run that runs out measures neither
        (no checkpointing with a larger micro-batch, then with a shorter pipeline, each out). A
        risky change with one that takes no memory risks nothing more than it alone, and measures
        both when it fits; one with a change that frees memory is a compound move's gamble."""
        held, means = self._pairable(base, singles)
        held = [
            m
            for m, mean in zip(held, means[1:])
            if mean >= means[0] - TIE or m.values[m.changed[0]] == self.baseline.get(m.changed[0])
        ]
        return self._paired(base, itertools.combinations(held, 2), "pair of moves")

    def micro_batch_pairs(self, base: Mapping[str, Any], singles: Sequence[Move]) -> list[Move]:
        """A change that takes memory and that the throughput model rates slower than ``base`` (by
        more than ``TIE``), together with a micro-batch moved along its axis: an untried pair, while
        no finished run has held that change with a micro-batch on the same side of ``base``'s. A
        change that takes memory and loses speed alone is in a space for what it buys with that
        memory, which is traded against the micro-batch: packing sequences pays only once a
        micro-batch is large enough to fill; a secondary weight partition or a larger prefetch,
        only while a small one leaves the collectives exposed; CUDA graphs, while launches are what
        a step waits on. The additive model rates such a pair by its parts and cannot see the trade
        until a run holds both. ``_best_move`` widens the pair's spread by ``INTERACTION_SD`` per
        position the micro-batch goes, so where no change promises a gain alone the far ends are
        tried first, one run a side (a run on the side that loses says the trade goes the other
        way), and a change that gains alone still goes first. The same rules as ``pairs``
        otherwise. A micro-batch is a parameter its name calls one (``roles``)."""
        held, means = self._pairable(base, singles)
        losing = [
            m
            for m, mean in zip(held, means[1:])
            if mean < means[0] - TIE and self.stacks_memory(base, m) and not _is_micro(self.space.param(m.changed[0]))
        ]
        out = []
        for p in self.free:
            if not losing or p.semantic or not _is_micro(p) or base.get(p.name) not in p.choices:
                continue
            pos = axis(p)
            here = pos[p.choices.index(base[p.name])]
            for v, at in zip(p.choices, pos):
                if v == base[p.name] or here is None or at is None:
                    continue
                along = Move(self.full({**base, p.name: v}), (p.name,), losing[0].base)
                for m in self._paired(base, ((along, x) for x in losing), "untried pair"):
                    if not self._tried_on_side(m, p.name, base):
                        out.append(dataclasses.replace(m, interaction_sd=INTERACTION_SD * abs(at - here)))
        return out

    def _tried_on_side(self, move: Move, micro: str, base: Mapping[str, Any]) -> bool:
        """True when a finished run held ``move``'s other change with a micro-batch ``micro`` on the
        same side of ``base``'s as ``move``'s."""
        (other,) = (n for n in move.changed if n != micro)
        p = self.space.param(micro)
        pos, choices = axis(p), p.choices

        def side(value: Any) -> int:
            if value not in choices or pos[choices.index(value)] is None:
                return 0
            return int(np.sign(pos[choices.index(value)] - pos[choices.index(base[micro])]))

        return any(
            r.status in FINISHED
            and r.values.get(other) == move.values[other]
            and side(r.values.get(micro)) == side(move.values[micro])
            for r in self.records
            if r.outcome is Outcome.LAUNCHED and r.values
        )

    def _pairable(self, base: Mapping[str, Any], singles: Sequence[Move]) -> tuple[list[Move], np.ndarray]:
        """The moves of ``singles`` a pair may take (no semantic parameter) and the modelled log
        throughput of ``base`` and of each of them."""
        semantic = {p.name for p in self.free if p.semantic}
        held = [m for m in singles if m.changed[0] not in semantic]
        if len(held) < 2:
            return [], np.zeros(1)
        means, _ = self.tput.predict([base] + [m.values for m in held])
        return held, means

    def _paired(self, base: Mapping[str, Any], pairs: Iterable[tuple[Move, Move]], kind: str) -> list[Move]:
        """Each of ``pairs`` (two one-parameter moves from ``base``) as one move, when the two change
        different parameters, not two environment variables, and two that each take memory only
        where ``LIKELY`` to fit."""
        env = {p.name for p in self.free if p.target is Target.ENV}
        out = [
            Move({**a.values, b.changed[0]: b.values[b.changed[0]]}, (a.changed[0], b.changed[0]), a.base, kind=kind)
            for a, b in pairs
            if a.changed != b.changed and not (a.changed[0] in env and b.changed[0] in env)
        ]
        return [m for m in out if not self.stacks_memory(base, m) or self.memory.p_fits_model(m.values) >= LIKELY]

    def stacks_memory(self, base: Mapping[str, Any], move: Move) -> bool:
        """True when each of ``move``'s changes from ``base`` is to a value declared to hold more
        device memory (no checkpointing and a larger micro-batch)."""
        params = {p.name: p for p in self.free}
        return all(
            (p := params.get(name)) is not None
            and p.memory.signed
            and p.memory_rank(move.values[name]) > p.memory_rank(base[name])
            for name in move.changed
        )

    def interactions(self, base: Mapping[str, Any], number: int) -> list[Move]:
        """NCCL's protocol and a gradient bucket size (``nccl_interactions``) changed in one trial from
        ``base``: each protocol built for large messages (Simple) with buckets up to ``AXIS_REACH``
        positions larger, while no finished run has held that protocol with another bucket than
        the baseline's. The additive model rates such a pair by its parts, which may each lose
        alone and win together, so ``propose`` rates it as likely as not to beat the incumbent,
        within the spread the model gives it: a pair that may interact."""
        out = []
        for a, b in self.interacting:
            choices = next(p for p in self.free if p.name == b).choices
            at = choices.index(base[b])
            for va in next(p for p in self.free if p.name == a).choices:
                if va == base[a] or not for_large_messages(va) or self._held_together(a, va, b):
                    continue
                larger = choices[at + 1 : at + 1 + AXIS_REACH]
                out.extend(Move({**base, a: va, b: vb}, (a, b), number, kind="pair that may interact") for vb in larger)
        return out

    def _held_together(self, a: str, va: Any, b: str) -> bool:
        """True when a finished run held ``a=va`` with another value of ``b`` than the baseline's."""
        return any(
            r.status in FINISHED and r.values.get(a) == va and r.values.get(b) != self.baseline.get(b)
            for r in self.records
            if r.outcome is Outcome.LAUNCHED and r.values
        )

    def without_slower_enablers(
        self, base: Mapping[str, Any], singles: list[Move], enablers: set[tuple[str, Any]]
    ) -> list[Move]:
        """``singles`` less the moves to an unmeasured enabler that the throughput model does not
        rate faster than ``base``. The model's prior holds a memory-saving change slower (no faster
        for a semantic parameter, such as a prompt limit); only the study's measured trend along the
        parameter (a shorter limit measured faster at each step so far) can rate it faster, and then
        nothing is traded for the memory it frees."""
        held = [m for m in singles if (m.changed[0], m.values[m.changed[0]]) in enablers]
        if not held:
            return singles
        means, _ = self.tput.predict([base] + [m.values for m in held])
        slower = {self._key(m.values) for m, mean in zip(held, means[1:]) if mean <= means[0]}
        return [m for m in singles if self._key(m.values) not in slower]

    def propose(self, rng: random.Random) -> Proposal | None:
        """The best-scored move, or None (then ``declined`` says why). When no move is worth a trial
        and the study changed the training to get its lead, the best move that keeps the training as
        the user runs it, scored against the fastest such config (``speed_only_move``)."""
        ranked = self.ranked()
        if self.speed_only_unanswered(ranked):
            found = self.speed_only_move(rng, ranked, LAST_TRIALS_WHY)
            if found is not None:
                return found
        found = self._best_move(rng, ranked)
        return found if found is not None else self.speed_only_move(rng, ranked)

    @cached_property
    def user_training(self) -> dict[str, Any]:
        """The free semantic parameters at the user's values (``study_reference``), read once per
        proposal: the records do not change within it."""
        ref = study_reference(self.space, self.records)
        return {p.name: ref[p.name] for p in self.free if p.semantic and p.name in ref}

    def speed_only_unanswered(self, ranked: Sequence[tuple[float, int, Mapping[str, Any], bool]]) -> bool:
        """True in the run's last ``LAST_TRIALS`` search trials while the leading config changes the
        training, no config that keeps it is stable, and no search trial has tried one: the report's
        speed-only answer would be empty, so one trial goes to it before the run ends."""
        user = self.user_training
        if self.trials_left is None or self.trials_left >= LAST_TRIALS or not user or not ranked:
            return False
        keeps = partial(keeps_semantics, semantic_ref=user)
        searched = (r for r in self.records if r.outcome is Outcome.LAUNCHED and r.kind is TrialKind.SEARCH)
        return (
            not keeps(_lead(ranked)[2])
            and not any(row[3] and keeps(row[2]) for row in ranked)
            and not any(r.values and keeps(r.values) for r in searched)
        )

    def speed_only_move(
        self,
        rng: random.Random,
        ranked: Sequence[tuple[float, int, Mapping[str, Any], bool]],
        why: str = SPEED_ONLY_WHY,
    ) -> Proposal | None:
        """The best move among configs that keep every free semantic parameter at the user's value,
        its expected gain over the fastest stable such config: the report shows that config next to
        the fastest that changes the training, and a study whose moves there promise nothing more
        spends its trials on it rather than on a blind draw (``why`` says which, in its why-line).
        None (``declined`` kept) when the space has no free semantic parameter or the leading config
        already keeps them."""
        user = self.user_training
        if not user or not ranked:
            return None
        keeps = partial(keeps_semantics, semantic_ref=user)
        if keeps(_lead(ranked)[2]):
            return None
        declined = self.declined
        incumbent = max((row[0] for row in ranked if row[3]), default=None)
        back = self.training_set_back(ranked, user)
        found = self._best_move(rng, [row for row in ranked if keeps(row[2])], keeps, incumbent, back)
        self.declined = declined
        if found is None:
            return None
        return dataclasses.replace(found, reason=f"{found.reason}; {why}")

    def training_set_back(
        self, ranked: Sequence[tuple[float, int, Mapping[str, Any], bool]], user: Mapping[str, Any]
    ) -> list[Move]:
        """The leading stable configs with every semantic parameter set back to ``user`` (the
        user's values): where no config keeping the training ran stable, what the study learnt of
        the other parameters (micro-batches, offload, NCCL) is tried with the training as the user
        runs it, rather than leaving the speed-only answer empty."""
        out = []
        for _, number, values, stable in ranked[:BASES]:
            changed = tuple(n for n, v in user.items() if values.get(n) != v)
            if stable and changed:
                out.append(Move(self.full({**values, **user}), changed, number, kind="the training set back"))
        return out

    def _best_move(
        self,
        rng: random.Random,
        ranked: Sequence[tuple[float, int, Mapping[str, Any], bool]],
        keeps: Callable[[Mapping[str, Any]], bool] | None = None,
        incumbent: float | None = None,
        extra: Sequence[Move] = (),
    ) -> Proposal | None:
        """The best-scored move from the first of ``ranked`` (those ``keeps`` accepts, when given),
        or of ``extra``, its gain over the best stable config among them; the gain it records is
        over ``incumbent`` (the study's, when the ranking was narrowed; else that best), what the
        study checks its odds by. A narrowed ranking with no stable config moves from its finished
        configs, ranked by the odds a move fits and finishes times its expected throughput."""
        stable = [row for row in ranked if row[3]]
        if stable or keeps is not None:
            bases = [(number, values) for _, number, values, _ in ranked[:BASES]]
            best = max(row[0] for row in stable) if stable else None
        else:
            launched = [r for r in self.records if r.outcome is Outcome.LAUNCHED and r.values]
            if not launched:
                self.declined = "no launched trial to move from"
                return None
            bases = [(r.number, r.values) for r in launched[-BASES:]]
            best = None
        pool = [m for m in self.moves(bases) if keeps is None or keeps(m.values)]
        keyed = {self._key(m.values): m for m in reversed(extra) if self.admits(m.values)}
        keyed.update((self._key(m.values), m) for m in pool)
        pool = list(keyed.values())
        if not pool:
            self.declined = "every move from the best configs is tried or refused"
            return None
        additive, sd = self.tput.predict([m.values for m in pool])
        sd = np.hypot(sd, [m.interaction_sd for m in pool])
        mean = additive
        if best is not None:
            may_interact = np.array([m.kind == "pair that may interact" for m in pool])
            mean = np.where(may_interact, np.maximum(additive, best), additive)
        fits = np.array([self.memory.p_fits_model(m.values) for m in pool])
        ok, worth, ratio = np.array([self.failures.risk(m.values) for m in pool]).reshape(len(pool), 3).T
        if best is not None:
            gain = expected_improvement(mean, sd, best)
        else:
            gain = np.exp(mean - mean.max()) * MIN_EXPECTED_GAIN * 10
        plain = np.array([1.0 - PARSIMONY * self.changes(m.values) for m in pool])
        score = gain * fits * worth * plain * (1.0 + 1e-6 * np.array([rng.random() for _ in pool]))
        floor = MIN_EXPECTED_GAIN * (0.1 if best is None else 1.0)
        likely = ok >= LIKELY
        if (likely & (score >= floor)).any():
            score = np.where(likely, score, 0.0)
        affordable = np.array([self.affordable(f, o, c) for f, o, c in zip(fits, ok, ratio)])
        over = not (affordable & (score >= floor)).any() and bool((score >= floor).any())
        score = np.where(affordable, score, 0.0)
        i = int(np.argmax(score))
        if score[i] < floor:
            self.declined = (
                "no move within the study's failure budget is worth a trial (failed runs took "
                f"{duration(self.budget.failed_s)} of {duration(self.budget.launched_s)})"
                if over
                else f"no move is worth a trial (best expected gain {score[i]:.2%} after the odds it fits and "
                f"finishes, needs {floor:.2%})"
            )
            safe = np.flatnonzero(likely & affordable & (fits >= LIKELY))
            if keeps is None and len(safe):
                j = max(safe, key=lambda k: (score[k], additive[k]))  # promising nothing: the fastest modelled
                self.runner_up = self._proposal(pool[j], float(score[j]), float(fits[j]), additive[j], best, incumbent)
                self.runner_up_promises = bool(score[j] >= RUNNER_UP_SHARE * floor)
            return None
        return self._proposal(pool[i], float(score[i]), float(fits[i]), additive[i], best, incumbent)

    def _proposal(
        self, move: Move, score: float, fits: float, additive: float, best: float | None, incumbent: float | None
    ) -> Proposal:
        """``move`` as a proposal: its modelled gain over ``best`` in its why-line, the one over
        ``incumbent`` (``best`` when None) recorded; its odds to fit shown where the model knows them."""
        additive = float(additive)
        gain_log = additive - (best or additive)
        over = best if incumbent is None else incumbent
        values = move.values
        shown, model = (self.memory.p_fits(values), fits) if self.memory.knows(values) else (None, None)
        recorded = additive - (over or additive)
        return Proposal(values, self.describe(move, gain_log, shown), score, shown, recorded, model)

    def affordable(self, fits: float, ok: float, cost_ratio: float) -> bool:
        """True when a run fitting with odds ``fits``, finishing with ``ok`` and whose failure costs
        ``cost_ratio`` finished runs (``FailureModel.risk``) fits the study's failure budget
        (``failure_budget``)."""
        return self.budget.allows(self.budget.expected_failed_s(fits * ok, cost_ratio))

    def describe(self, move: Move, gain: float, fits: float | None) -> str:
        changes = ", ".join(f"{n}={move.values[n]}" for n in move.changed)
        parts = move.kind in ("pair that may interact", "untried pair")
        modelled = f"modelled {gain:+.1%}" + (" by its parts alone" if parts else "")
        odds = "memory not known yet" if fits is None else f"fits {fits:.0%}"
        return f"{move.kind} from trial {move.base}: {changes} ({modelled}, {odds})"


def uniform_draw(every: Mapping[str, BaseDistribution], rng: random.Random) -> dict[str, Any]:
    """A config drawn at random, each parameter uniformly over its values, as Optuna spells it (what
    TPE draws in its start-up trials, here drawn whole so that it can be checked before it runs)."""
    out: dict[str, Any] = {}
    for name, dist in every.items():
        if isinstance(dist, IntDistribution):
            out[name] = rng.randrange(dist.low, dist.high + 1, dist.step)
        else:
            out[name] = rng.choice(list(dist.choices))
    return out


def tpe_sampler(seed: int | None) -> TPESampler:
    """Optuna's TPE as the study uses it: on its own (``--sampler tpe``) and where no local move is
    worth a trial."""
    return TPESampler(seed=seed, n_startup_trials=8, multivariate=True)


COUNTED = frozenset(k.value for k in (TrialKind.BASELINE, TrialKind.SEARCH, TrialKind.WARM_START))
"""Kinds of trial a run's ``--trials`` counts."""


class LocalSearchSampler(BaseSampler):
    """Optuna's face of ``Planner`` (the module docstring); TPE when no local move is worth a trial."""

    def __init__(
        self,
        space: SearchSpace,
        held: HeldParameters | Mapping[str, Any] | None = None,
        seed: int | None = None,
        planned_trials: int | None = None,
        trials_fit: Callable[[int], int | None] | None = None,
    ) -> None:
        """``planned_trials``: the trials this run is asked to launch (the failure budget's horizon
        counts them after those the study launched before; None: no horizon); ``trials_fit``: given
        the search trials this run launched, those its wall-clock budget still has time for, this
        one included (None from it: no deadline, or nothing timed yet)."""
        self.space = space
        self.planned_trials = planned_trials
        self.trials_fit = trials_fit
        self._horizon: int | None = None
        self.held = held if isinstance(held, HeldParameters) else HeldParameters.of_values(space, held)
        """The run's held parameters, read at each proposal (a parameter dropped mid-study is held)."""
        self._tpe = tpe_sampler(seed)
        self._rng = random.Random(seed)
        self._seed = seed
        self.last: Proposal | None = None
        self._last_number: int | None = None
        self._fallback: str | None = None
        """Why TPE proposed the last trial, when it did (None for an enqueued one)."""
        self._drawn: tuple[dict[str, Any], dict[str, float]] = ({}, {})
        """TPE's last draw and what the planner's models predict of it (``odds``)."""
        self._first_number: int | None = None
        """The number of this run's first trial (``before_trial``)."""

    @property
    def pinned(self) -> dict[str, Any]:
        """The values held now."""
        return self.held.params

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return distributions(self.space, self.pinned)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number]
        records = R.records_of(t for t in trials if t.state is not TrialState.RUNNING)
        if self._horizon is None and self.planned_trials is not None:
            self._horizon = self.planned_trials + sum(r.outcome is Outcome.LAUNCHED for r in records)
        running = [t for t in trials if t.state is TrialState.RUNNING and t.number >= (self._first_number or 0)]
        left = self._trials_left(records, sum(t.user_attrs.get(R.A_KIND, "search") in COUNTED for t in running))
        planner = Planner(self.space, self.pinned, records, load_sweep(study, self.space), self._horizon, left)
        self.last = planner.propose(self._rng)
        self._last_number = trial.number
        self._fallback = None
        if self.last is None:
            if "fixed_params" not in trial.system_attrs:
                self._fallback = f"TPE, since {planner.declined}"
            params = self._tpe_that_fits(study, trial, planner)
            if self.last is None:
                self._note_draw(planner, from_optuna(self.space, params, self.pinned))
            return params
        proposal = to_optuna(self.space, self.last.values, self.pinned)
        return {k: v for k, v in proposal.items() if k in search_space}

    def _tpe_that_fits(self, study: optuna.Study, trial: FrozenTrial, planner: Planner) -> dict[str, Any]:
        """TPE's proposal for ``trial``: the first of up to ``TPE_DRAWS`` that the planner would
        launch itself (``Planner.admits``: untried, within the rules, not refused), that its memory
        model gives an even chance to fit and its failure model an even chance to finish, within the
        study's failure budget (``Planner.affordable``); else the likeliest to do both of them, those
        it would launch first, then those within the budget, then those the failure model expects
        to finish (TPE knows nothing of memory, of the values the command refused or of the configs
        already run: on a landscape where most configs run out of memory, or where a batch rule
        refuses a value, some of its proposals did, and once every config it favours has been run or
        refused it proposes them again, each a trial told and spent for nothing)."""
        tpe_space = self._tpe.infer_relative_search_space(study, trial)
        likeliest: tuple[tuple[bool, bool, bool, float], dict[str, Any]] | None = None
        every = distributions(self.space, self.pinned)
        rng = random.Random(f"{self._seed}:{trial.number}") if self._seed is not None else self._rng
        for _ in range(TPE_DRAWS):
            params = self._tpe.sample_relative(study, trial, tpe_space)
            if set(params) != set(every):  # TPE's start-up trials: each parameter at random
                params = uniform_draw(every, rng)
            values = from_optuna(self.space, params, self.pinned)
            fits = planner.memory.p_fits_model(values)
            ok, _, ratio = planner.failures.risk(values)
            affordable = planner.affordable(fits, ok, ratio)
            admitted = planner.admits(values)
            if admitted and fits >= 0.5 and ok >= LIKELY and affordable:
                return params
            if likeliest is None or (admitted, affordable, ok >= LIKELY, fits * ok) > likeliest[0]:
                likeliest = ((admitted, affordable, ok >= LIKELY, fits * ok), params)
        spent = likeliest is None or not all(likeliest[0][:3])  # run before, beyond the budget, or likely to fail
        risky = likeliest is not None and not all(likeliest[0][1:3])  # beyond the budget, or likely to fail
        if planner.runner_up is not None and (risky or (spent and planner.runner_up_promises)):
            self.last = dataclasses.replace(planner.runner_up, reason=f"{planner.runner_up.reason}; {RUNNER_UP_WHY}")
            self._fallback = None
            return {k: v for k, v in to_optuna(self.space, self.last.values, self.pinned).items() if k in every}
        return likeliest[1] if likeliest is not None else {}

    def _note_draw(self, planner: Planner, values: Mapping[str, Any]) -> None:
        """Keep what the planner's models predict of TPE's draw ``values`` (``odds``), and say it in the
        trial's why-line as a move's says it: the user reads a draw's risk as a move's, and the
        study checks its odds by every proposal's."""
        stable = [row[0] for row in planner.ranked() if row[3]]
        gain = float(planner.tput.predict([values])[0][0]) - max(stable) if stable else None
        odds: dict[str, float] = {} if gain is None else {"gain": gain}
        said = [] if gain is None else [f"modelled {gain:+.1%}"]
        if planner.memory.knows(values):
            odds.update(fits=planner.memory.p_fits(values), fits_model=planner.memory.p_fits_model(values))
            said.append(f"fits {odds['fits']:.0%}")
        self._drawn = (dict(values), odds)
        if self._fallback and said:
            self._fallback = f"{self._fallback} ({', '.join(said)})"

    def why(self, number: int, values: Mapping[str, Any]) -> str | None:
        """Why trial ``number`` was proposed: the planner's move when it proposed exactly ``values``,
        or why TPE proposed instead (None for an enqueued baseline or re-run)."""
        if self._last_number != number:
            return None
        if self.last is None:
            return self._fallback
        if any(self.last.values.get(k) != v for k, v in values.items()):
            return None
        return self.last.reason

    def odds(self, number: int, values: Mapping[str, Any]) -> dict[str, float] | None:
        """What the planner predicted of trial ``number`` when it proposed exactly ``values``
        (``study_records.A_ODDS``); None otherwise."""
        if self.why(number, values) is None:
            return None
        if self.last is None:
            drawn, odds = self._drawn
            return dict(odds) if odds and all(drawn.get(k) == v for k, v in values.items()) else None
        odds = {"gain": self.last.gain_log or 0.0}
        if self.last.fits is not None:
            odds["fits"] = self.last.fits
        return odds if self.last.fits_model is None else {**odds, "fits_model": self.last.fits_model}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def _trials_left(self, records: Sequence[TrialRecord], running: int = 0) -> int | None:
        """Search trials this run plans after the one being proposed (None: no plan): the planned
        trials less those launched since this run's first trial and the ``running`` others (its
        baseline counts; re-runs and forced runs do not, as the run's count of trials does not),
        or fewer where the run's wall-clock budget ends first (``trials_fit``)."""
        if self._first_number is None:
            return None
        run = sum(
            r.outcome is Outcome.LAUNCHED and r.kind.value in COUNTED and r.number >= self._first_number
            for r in records
        )
        fit = self.trials_fit(run + running) if self.trials_fit is not None else None
        by_time = None if fit is None else fit - running - 1
        if self.planned_trials is None:
            return by_time
        by_count = self.planned_trials - run - running - 1
        return by_count if by_time is None else min(by_count, by_time)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self._first_number is None:
            self._first_number = trial.number
        self._tpe.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()
        self._rng.seed()


def _is_micro(p: Parameter) -> bool:
    """True when ``p``'s name (or its flag) calls it a micro-batch (``roles``)."""
    role = param_role(p.name, p.arg)
    return role is not None and role.name == "micro"
