"""The live display prints log text as text: brackets in evidence are not markup."""

import io

from rich.console import Console

from nccl_tune.failure import Evidence, FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.display import Display, describe


def test_evidence_with_brackets_is_printed_verbatim():
    buf = io.StringIO()
    display = Display(Console(file=buf, width=200), load_space("skyrl-text2sql"))
    line = "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out [bold]"
    result = TrialResult(
        number=3, status=FailureClass.COLLECTIVE_TIMEOUT, stop_reason=StopReason.EXITED,
        verdict=Verdict(FailureClass.COLLECTIVE_TIMEOUT, evidence=(Evidence(12, line),), advice="see [fr] dumps"),
    )
    display.trial_finished(3, result, near_wall=False, incumbent=None)
    text = buf.getvalue()
    assert line in text and "see [fr] dumps" in text


def test_describe_leaves_out_unset_env_and_unchanged_values():
    space = load_space("skyrl-text2sql")
    base = space.defaults()
    values = {**base, "trainer.micro_train_batch_size_per_gpu": 4, "NCCL_PROTO": "LL128"}
    assert describe(space, values, base) == "micro_train_batch_size_per_gpu=4 NCCL_PROTO=LL128"
    assert "NCCL_ALGO" not in describe(space, values)
