"""Shared fixtures for launcher tests: a unique study per test, trial specs around the fake
trainer script, a fake NVML state file, and a guard that no marked process outlives a test."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from nccl_tune.gpu import NvmlProbe
from nccl_tune.gpu_fake import FakeNvml, h100_node, write_state
from nccl_tune.launchers.teardown import find_marked, kill_marked, study_match
from nccl_tune.trial import Clocks, StopRule, TrialSpec
from tests.conftest import loopback_ray_cluster

from .helpers import trainer_argv


@pytest.fixture
def study():
    """A study name no other test (or other process on the machine) uses; the test fails if a
    process of it outlives the test (and the process is killed, so other tests are not hurt)."""
    name = f"lt-{uuid.uuid4().hex[:10]}"
    yield name
    left = find_marked(study_match(name))
    if left:
        kill_marked(study_match(name), 1.0)
        pytest.fail(f"processes of study {name} outlived the test: {[p.describe() for p in left]}")


@pytest.fixture
def make_spec(study: str, tmp_path: Path) -> Callable[..., TrialSpec]:
    """Build a TrialSpec for the fake trainer: ``make_spec(*trainer_args, number=0, clocks=..., ...)``."""

    def build(*args: str, number: int = 0, argv: list[str] | None = None, **kw) -> TrialSpec:
        kw.setdefault("clocks", Clocks(startup_timeout_s=30, stall_timeout_s=10, grace_s=1.0))
        kw.setdefault("stop", StopRule(warmup_steps=1, measured_steps=2))
        kw.setdefault("env", {})
        kw.setdefault("params", {})
        return TrialSpec(
            study=study,
            number=number,
            argv=tuple(argv if argv is not None else trainer_argv(*args)),
            trial_dir=tmp_path / "trials" / f"{number:04d}",
            **kw,
        )

    return build


@pytest.fixture
def fake_gpus(tmp_path: Path) -> tuple[Path, NvmlProbe]:
    """A fake 2-GPU node (state file, probe reading it)."""
    path = tmp_path / "fake_nvml.json"
    write_state(path, h100_node(2, used_gib=0.5))
    return path, NvmlProbe(FakeNvml(path))


@pytest.fixture(scope="package")
def ray_cluster():
    """The loopback Ray cluster of this package's tests (shut down after its last test, so later
    packages see no Ray running)."""
    with loopback_ray_cluster() as cluster:
        yield cluster
