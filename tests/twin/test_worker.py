"""The twin's rank: a Flight Recorder dump in progress is never cut short by the rank's own failure;
its optimizer steps as torch's Adam does."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from twin.worker import Rank, _Adam, _tiny_policy


def test_a_failing_rank_waits_for_the_dump_its_watcher_started(tmp_path: Path) -> None:
    """The stalled rank's flag watcher starts its dump; the rank then wakes, fails its next collective
    and calls dump_fr again before aborting. That call must wait for the dump in progress: otherwise
    the rank aborts mid-dump, its trace and the line naming its rank are lost, and the stall cannot be
    pinned on it (the flaky test_stalled_rank_is_a_collective_timeout_naming_it under load)."""
    ours, theirs = socket.socketpair()
    spec = {
        "rank": 1,
        "world": 3,
        "gpus": [1],
        "run_dir": str(tmp_path),
        "sock_fd": ours.fileno(),
        "color": False,
        "fr_enabled": True,
        "fr_prefix": str(tmp_path / "fr" / "nccl_trace_rank_"),
    }
    rank = Rank(spec)

    def slow_dump() -> bytes:  # a dump on a loaded machine
        time.sleep(0.5)
        return b"trace"

    rank.torch = SimpleNamespace(_C=SimpleNamespace(_distributed_c10d=SimpleNamespace(_dump_fr_trace=slow_dump)))
    watcher = threading.Thread(target=rank.dump_fr)
    watcher.start()
    time.sleep(0.1)
    rank.dump_fr()  # the main thread, about to abort
    assert (tmp_path / "fr" / "nccl_trace_rank_1").read_bytes() == b"trace"
    watcher.join()
    theirs.close()


def test_the_ranks_optimizer_steps_as_torchs_adam() -> None:
    """The rank writes Adam out (torch.optim imports TorchDynamo, seconds of CPU per rank per run); its
    steps must be Adam's, so the losses and gradient norms the twin prints stay those of real training."""
    torch.manual_seed(0)
    ours, theirs = _tiny_policy(torch), _tiny_policy(torch)
    theirs.load_state_dict(ours.state_dict())
    opt_ours = _Adam(torch, list(ours.parameters()), lr=1e-3)
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in ours.parameters()]
    for _ in range(4):
        tokens = torch.randint(0, 256, (3, 9))
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            model(tokens).logsumexp(-1).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert max(float((a.detach() - b).abs().max()) for a, b in zip(ours.parameters(), before)) > 1e-4
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.allclose(a, b, atol=1e-6), float((a - b).abs().max())
