"""A trainer that prints one 300 MB line without a newline and then fails: the tuner reads the line
while the trial runs and again to classify the failure, keeping its head with a ``[... N bytes cut]``
marker, in bounded memory (it once took about 1 GB)."""

from __future__ import annotations

import json

import pytest

from tests.tuner.conftest import TINY_SPACE, run_cli_peak_rss

pytestmark = pytest.mark.timeout(400)


def test_a_300_mb_line_costs_the_tuner_little_memory(workdir, tiny_command):
    def run(study: str, *mode: str):  # micro 8 runs out of memory: the log is classified
        return run_cli_peak_rss(
            [
                "run",
                "--space",
                str(TINY_SPACE),
                "--study",
                study,
                "--trials",
                "1",
                "--confirm",
                "0",
                "--json",
                "--set",
                "trainer.micro=8",
                "--",
                *tiny_command,
                *mode,
            ],
            cwd=workdir,
        )

    small, small_peak = run("plain")
    assert small.returncode == 2, small.stderr
    big, big_peak = run("big", "trainer.mode=bigline")
    assert big.returncode == 2, big.stderr
    trial = json.loads(big.stdout)["trials"][0]
    assert trial["status"] == "oom" and "CUDA out of memory" in " ".join(trial["evidence"]), trial
    log = workdir / "results/big/trial-0000/output.log"
    assert log.stat().st_size > 300 * (1 << 20)  # every byte is kept on disk
    print(f"nccl-tune peak RSS: {small_peak:.0f} MiB normal, {big_peak:.0f} MiB with a 300 MiB line")
    assert big_peak - small_peak < 200, (small_peak, big_peak)
