"""``clocks_for``: the space's clocks, the command line's clock options, the study's measurements."""

from __future__ import annotations

from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.trial_builder import clocks_for
from tests.tuner.conftest import TINY_SPACE


def test_options_replace_the_space_clocks_one_field_each_and_measurements_are_learned() -> None:
    space = load_space(str(TINY_SPACE))
    plain = clocks_for(space, RunSettings(command=("x",)))
    assert plain == space.clocks
    given = clocks_for(
        space,
        RunSettings(command=("x",), stall_timeout_s=11.0, startup_timeout_s=22.0, trial_timeout_s=33.0, grace_s=4.0),
        [{"step": 2.0, "generate": 5.0}, {"step": 3.0}],
    )
    assert (given.stall_timeout_s, given.startup_timeout_s, given.trial_timeout_s, given.grace_s) == (
        11.0,
        22.0,
        33.0,
        4.0,
    )
    assert (given.stall_floor_s, given.stall_multiplier) == (plain.stall_floor_s, plain.stall_multiplier)
    assert dict(given.phase_max_s) == {"step": 3.0, "generate": 5.0}
    assert given.phase_estimates_s == space.clocks.phase_estimates_s
