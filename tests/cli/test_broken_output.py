"""The tuner's own output going away (``nccl-tune run ... | head -3``, a ``tee`` that dies) is not a
trial's failure: the run goes on without printing and every trial is recorded as it ended."""

from __future__ import annotations

import os
import subprocess
import sys

import optuna
import pytest

from nccl_tune.streams import GuardedStream
from tests.tuner.conftest import NCCL_TUNE, TINY_SPACE, TINY_TRAINER

pytestmark = pytest.mark.timeout(240)


def test_a_run_piped_into_head_goes_on_and_records_every_trial_as_it_ended(tmp_path):
    tuner = subprocess.Popen(
        [str(NCCL_TUNE), "run", "--space", str(TINY_SPACE), "--study", "piped", "--results", str(tmp_path / "r")]
        + ["--trials", "3", "--confirm", "0", "--seed", "0", "--", sys.executable, str(TINY_TRAINER)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    head = [tuner.stdout.readline() for _ in range(3)]  # what `| head -3` reads, then it exits
    tuner.stdout.close()
    _, err = tuner.communicate(timeout=200)
    assert tuner.returncode in (0, 2), (tuner.returncode, head, err)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.count("stdout is gone (broken pipe): the run goes on without printing there") == 1, err
    study = optuna.load_study(study_name="piped", storage=f"sqlite:///{tmp_path / 'r' / 'nccl-tune.db'}")
    launched = [t for t in study.get_trials() if "result" in t.user_attrs]
    assert len(launched) == 3, [(t.number, t.state, t.user_attrs.get("abandoned")) for t in study.get_trials()]
    assert not any("abandoned" in t.user_attrs for t in study.get_trials())
    assert launched[0].user_attrs["kind"] == "baseline" and launched[0].user_attrs["status"] == "ok"


def test_a_terminal_that_closed_silences_the_stream_instead_of_raising(tmp_path):
    """EIO is what a write to a hung-up terminal gets: a pty whose master side closed."""
    import pty

    master, slave = pty.openpty()
    stream = GuardedStream(os.fdopen(os.dup(slave), "w", buffering=1), "stdout")
    os.close(master)
    os.close(slave)
    stream.write("a line nobody reads\n")
    stream.flush()
    assert stream.lost is not None
    stream.write("and another\n")
