"""Resuming after a tuner that was killed: its trials are still RUNNING in the storage.

For each RUNNING trial this host started: refuse when the tuner that started it is alive (another
``nccl-tune run`` is running the study), kill what is left of it (the launcher's ``reap``), then
keep its result when the trial finished (``result.json`` in its folder) or record it as
interrupted and ask for its values again. A trial with no folder (the tuner died between asking
for the values and starting the command) is interrupted too; nothing is written for it.

Only Optuna's public API is used: the storage's trial ids and ``optuna.trial.Trial``.
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.trial_files import interrupted_result
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.gpu_size import sized_among
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.storage import marker_scope
from nccl_tune.tuner.records.telling import requeue, tell_result
from nccl_tune.tuner.trials.display import Display

KILLED = "the tuner was killed while this trial ran"


def live_trial(study: optuna.Study, storage: optuna.storages.BaseStorage, number: int) -> optuna.Trial:
    """The unfinished trial ``number`` of ``study``, to set attributes on and tell."""
    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, number))


def orphans(study: optuna.Study, host: str) -> list[FrozenTrial]:
    """Trials this host started that are still recorded as running."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return [t for t in running if t.user_attrs.get(R.A_HOST) == host]


def _finished_result(t: FrozenTrial) -> TrialResult | None:
    """The result in the trial's folder, or an interrupted one recorded there (None without a folder)."""
    trial_dir = t.user_attrs.get(R.A_TRIAL_DIR)
    if not trial_dir or not Path(trial_dir).is_dir():
        return None
    return interrupted_result(Path(trial_dir), t.number, KILLED)


class Recovery:
    """Settles the trials of a tuner that was killed, before the study goes on."""

    def __init__(self, space: SearchSpace, held: HeldParameters, launcher: Launcher, display: Display) -> None:
        self.space = space
        self.held = held
        self.launcher = launcher
        self.display = display

    def run(self, study: optuna.Study, storage: optuna.storages.BaseStorage, storage_url: str, host: str) -> None:
        mine = orphans(study, host)
        for t in mine:
            pid = t.user_attrs.get(R.A_PID)
            if pid and self.launcher.tuner_alive(int(pid)):
                raise NcclTuneError(
                    f"study {study.study_name!r} is being run by nccl-tune (pid {pid}) on this host; "
                    "wait for it or use another --study"
                )
        for desc in self.launcher.reap(marker_scope(study.study_name, storage_url)):
            self.display.note(f"killed an orphan of an interrupted trial: {desc}")
        for t in mine:
            self.settle(study, live_trial(study, storage, t.number), t)

    def settle(self, study: optuna.Study, trial: optuna.Trial, t: FrozenTrial) -> None:
        """Keep ``t``'s finished result, or record it interrupted and ask for its values again."""
        result = _finished_result(t)
        if result is not None and result.status is not FailureClass.INTERRUPTED:
            result = sized_among(result, (r.result for r in R.records(study) if r.result))
            values = t.user_attrs.get(R.A_VALUES)
            worst = self.space.worst_tokens(values) if values else None
            forced = t.user_attrs.get(R.A_KIND) == R.TrialKind.FORCED.value
            tell_result(study, trial, result, self.space.min_headroom_frac, worst, forced)
            self.display.note(f"trial {t.number}: recovered its finished result ({result.status.value})")
            return
        if result is not None:
            trial.set_user_attr(R.A_RESULT, result.to_json())
        trial.set_user_attr(R.A_STATUS, FailureClass.INTERRUPTED.value)
        study.tell(trial, state=TrialState.FAIL)
        values = t.user_attrs.get(R.A_VALUES)
        if not values:  # killed while its values were being chosen
            self.display.note(f"trial {t.number}: interrupted before its values were chosen")
            return
        requeue(study, self.space, values, self.held.params, t.user_attrs.get(R.A_KIND, R.TrialKind.SEARCH.value))
        self.display.note(f"trial {t.number}: interrupted before it finished; it will be run again")
