"""``ray_node.TrialHost``, the body of the Ray launcher's actor, run in this process: the node reads
the phase lines of the command's output itself, so each GPU sample counts under the phase that was
open on the node when it was taken (the driver fetches the output later than that)."""

from __future__ import annotations

import time

import pytest

from nccl_tune.gpu import FAKE_NVML_ENV
from nccl_tune.launchers.ray_node import MemoryReading, TrialHost
from nccl_tune.trial import OUTSIDE_PHASES


def _run(host: TrialHost, spec, with_rules: bool) -> MemoryReading:
    """Start the trial on ``host``, fetch its output to the end as the driver does; the last reading."""
    host.start(spec.argv, {}, spec.marker, None, 0.05, spec.progress if with_rules else None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        chunk = host.read(0.2)
        if chunk.eof and chunk.returncode is not None:
            return chunk.memory
    raise AssertionError("the trial did not end within 60 s")


@pytest.mark.parametrize("with_rules", [True, False])
def test_the_node_counts_gpu_samples_under_the_phases_of_the_output(
    make_spec, fake_gpus, monkeypatch, with_rules
) -> None:
    state_path, _ = fake_gpus
    monkeypatch.setenv(FAKE_NVML_ENV, str(state_path))  # the node's own probe reads the fake GPUs
    spec = make_spec("--steps", "6", "--step-s", "0.3", "--gpu-state", str(state_path), "--gpu-gib", "40")
    host = TrialHost()
    try:
        reading = _run(host, spec, with_rules)
    finally:
        host.stop(spec.marker, 1.0)
        host.close()
    peak_frac = max(reading.gpu_peak_gib[i] / reading.gpu_total_gib[i] for i in reading.gpu_peak_gib)
    assert peak_frac > 0.5  # the trainer's 40 GiB were sampled
    if not with_rules:  # a caller that gives no rules gets no phases, as before
        assert reading.phase_peak_frac == {} and reading.phases_at_last_sample == ()
        return
    phases = reading.phase_peak_frac
    assert {"generate", "policy_train"} <= set(phases) <= {OUTSIDE_PHASES, "step", "generate", "policy_train"}
    assert max(phases.values()) == pytest.approx(peak_frac, abs=1e-3)
    assert reading.phases_at_last_sample
