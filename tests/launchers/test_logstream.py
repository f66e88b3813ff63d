"""The log reader: cleaning, chunk boundaries, prefilter, bounded memory, real pipes."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nccl_tune.diagnose.lines import MAX_LINE_BYTES
from nccl_tune.launchers.logstream import LineScanner, LogPump, clean_line
from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.trial import ProgressRules

SKYRL = (
    "\x1b[36m(skyrl_entrypoint pid=645566)\x1b[0m \x1b[32m2026-03-02 10:11:12.345\x1b[0m | "
    "\x1b[1mINFO    \x1b[0m | \x1b[36mskyrl_train.trainer\x1b[0m:\x1b[36mtrain\x1b[0m:\x1b[36m209\x1b[0m - "
    "\x1b[1mFinished: 'step', time cost: 81.23s\x1b[0m"
)
NCCL_INFO = "gpu-node-3:4021:4188 [3] NCCL INFO Channel 03/0 : 3[3] -> 4[4] via P2P/CUMEM/read\n"


@pytest.mark.parametrize(
    "raw, clean",
    [
        (
            SKYRL,
            "2026-03-02 10:11:12.345 | INFO     | skyrl_train.trainer:train:209 - Finished: 'step', time cost: 81.23s",
        ),
        ("(FSDPPolicyWorkerBase pid=959049) [rank3]: boom\n", "[rank3]: boom"),
        ("(WorkerDict pid=12, ip=10.0.0.7) memory: 3.00GiB\r\n", "memory: 3.00GiB"),
        ("(raylet) [2026-03-02] worker died", "[2026-03-02] worker died"),
        ("\x1b[36m(pid=77)\x1b[0m line", "line"),
        ("[36m(Actor pid=5)[0m bare remnants", "bare remnants"),
        (" 10%|#   | 1/10\r 50%|#####  | 5/10\r100%|##########| 10/10", "100%|##########| 10/10"),
        ("(not a ray prefix because of spaces here) text", "(not a ray prefix because of spaces here) text"),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


def _log_lines(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        r = rnd.random()
        if r < 0.05:
            lines.append(f"\x1b[1mFinished: 'phase{i % 3}', time cost: {i * 0.01:.2f}s\x1b[0m")
        elif r < 0.08:
            lines.append(f"(Worker pid={i}) rank {i % 8} memory: {i % 70}.50GiB(50.0%)")
        elif r < 0.09:
            lines.append(f"RuntimeError: failure number {i}")
        else:
            lines.append(NCCL_INFO.rstrip("\n") + f" #{i}")
    return lines


def _scan(data: bytes, chunk_sizes: list[int] | None, **kw) -> tuple[list[tuple[int, str]], LineScanner]:
    seen: list[tuple[int, str]] = []
    tracker = ProgressTracker(ProgressRules())
    scanner = LineScanner(lambda n, text, t: seen.append((n, text)), tracker.literals, **kw)
    if chunk_sizes is None:
        scanner.feed(data)
    else:
        pos, i = 0, 0
        while pos < len(data):
            size = chunk_sizes[i % len(chunk_sizes)]
            scanner.feed(data[pos : pos + size])
            pos, i = pos + size, i + 1
    scanner.finish()
    return seen, scanner


@pytest.mark.parametrize("chunks", [None, [1], [7, 13, 64], [4096], [100_000]])
def test_chunking_never_changes_lines_or_numbers(chunks: list[int] | None) -> None:
    lines = _log_lines(3000)
    data = ("\n".join(lines) + "\n").encode()
    seen, scanner = _scan(data, chunks)
    expected = [
        (i + 1, clean_line(text)) for i, text in enumerate(lines) if "Finished: '" in text or "memory: " in text
    ]
    assert seen == expected
    assert scanner.lines == len(lines)
    assert scanner.bytes == len(data)
    errors = scanner.summary().first_errors
    assert errors and all("RuntimeError" in e.text for e in errors)
    assert [e.line_no for e in errors] == [i + 1 for i, t in enumerate(lines) if "RuntimeError" in t][: len(errors)]


def test_last_line_without_newline_is_a_line() -> None:
    seen, scanner = _scan(b"a\nFinished: 'x', time cost: 1.00s", [5])
    assert seen == [(2, "Finished: 'x', time cost: 1.00s")]
    assert scanner.lines == 2


def test_memory_stays_bounded_on_a_long_log() -> None:
    tail_n, errors_n = 20, 5
    seen, scanner = _scan(
        ("\n".join(_log_lines(60_000, seed=1)) + "\n").encode(), [65536], tail_lines=tail_n, first_error_lines=errors_n
    )
    summary = scanner.summary()
    assert summary.lines == 60_000
    assert len(summary.tail) == tail_n and summary.tail[-1].line_no == 60_000
    assert [e.line_no for e in summary.tail] == list(range(60_000 - tail_n + 1, 60_001))
    assert len(summary.first_errors) == errors_n


def test_flood_lines_never_reach_the_parser() -> None:
    data = (NCCL_INFO * 50_000 + "Finished: 'step', time cost: 2.00s\n" + NCCL_INFO * 50_000).encode()
    seen, scanner = _scan(data, [1 << 20])
    assert seen == [(50_001, "Finished: 'step', time cost: 2.00s")]
    assert scanner.summary().parsed_lines == 1


def test_overlong_line_is_cut_but_counted() -> None:
    data = b"x" * (3 << 20) + b"\nFinished: 'step', time cost: 1.00s\n"
    seen, scanner = _scan(data, [1 << 18])
    assert seen == [(2, "Finished: 'step', time cost: 1.00s")]
    assert scanner.lines == 2 and scanner.bytes == len(data)
    head = scanner.summary().tail[0].text
    assert head == "x" * MAX_LINE_BYTES + f" [... {(3 << 20) - MAX_LINE_BYTES} bytes cut]"


def test_an_overlong_last_line_gets_its_marker_at_the_end() -> None:
    seen, scanner = _scan(b"ok\n" + b"y" * (MAX_LINE_BYTES + 10), [4096])
    assert scanner.summary().tail[-1].text.endswith("y [... 10 bytes cut]")


def test_without_literals_every_line_is_parsed() -> None:
    seen: list[tuple[int, str]] = []
    scanner = LineScanner(lambda n, t, _: seen.append((n, t)), None)
    scanner.feed(b"one\ntwo\n\x1b[1mthree\x1b[0m\n")
    assert seen == [(1, "one"), (2, "two"), (3, "three")]


def _pump(argv: list[str], out: Path, **kw) -> tuple[LogPump, list[tuple[int, str]], subprocess.Popen]:
    seen: list[tuple[int, str]] = []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    scanner = LineScanner(lambda n, t, _: seen.append((n, t)), (b"Finished: '",))
    pump = LogPump(proc.stdout.fileno(), out, scanner, **kw)
    pump.start()
    return pump, seen, proc


def test_pump_writes_every_byte_in_order_and_parses_stderr_too(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "for i in range(2000):\n"
        "    (sys.stderr if i % 2 else sys.stdout).write(f'line {i}\\n'); sys.stdout.flush(); sys.stderr.flush()\n"
        "sys.stderr.write(\"Finished: 'step', time cost: 1.00s\\n\")\n"
    )
    out = tmp_path / "output.log"
    pump, seen, proc = _pump([sys.executable, "-c", code], out)
    proc.wait(30)
    pump.join(10)
    assert pump.eof and pump.error is None
    lines = out.read_text().splitlines()
    assert lines[:2000] == [f"line {i}" for i in range(2000)]
    assert seen == [(2001, "Finished: 'step', time cost: 1.00s")]


def test_pump_stops_while_a_leftover_process_still_holds_the_pipe(tmp_path: Path) -> None:
    code = "import time\nprint(\"Finished: 'x', time cost: 1.00s\", flush=True)\ntime.sleep(60)\n"
    pump, seen, proc = _pump([sys.executable, "-c", code], tmp_path / "o.log", poll_s=0.05, drain_s=0.2)
    try:
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
        t0 = time.monotonic()
        pump.stop(timeout_s=5)
        assert not pump.is_alive()
        assert time.monotonic() - t0 < 4
        assert seen == [(1, "Finished: 'x', time cost: 1.00s")]
    finally:
        proc.kill()
        proc.wait()


def test_progress_bar_redraws_reach_the_parsers_before_the_line_ends() -> None:
    seen: list[tuple[int, str, float]] = []
    scanner = LineScanner(lambda n, text, t: seen.append((n, text, t)), (b"it/s",))
    scanner.feed(b"first line\n\r  0%|   | 0/9 [00:00<?, ?it/s]", now=1.0)
    scanner.feed(b"\r 11%|#  | 1/9 [00:01<00:08,  1.01it/s]", now=2.0)
    scanner.feed(b"\r 22%|## | 2/9 [00:02<00:07,  1.02it/s]\r 22%|## | 2/9 [00:02<00:07, ", now=3.0)
    scanner.feed(b" 1.02it/s]", now=3.5)  # the rest of a redraw that arrived in two reads
    assert [(n, t) for n, _, t in seen] == [(2, 1.0), (2, 2.0), (2, 3.0), (2, 3.5)]
    assert seen[1][1] == " 11%|#  | 1/9 [00:01<00:08,  1.01it/s]" and seen[3][1].endswith("1.02it/s]")
    scanner.feed(b"\n", now=4.0)  # the bar closes: its last redraw is not parsed again
    assert len(seen) == 4
    scanner.feed(b"\r 33%|### | 3/9 [00:03<00:06,  1.03it/s]\rdone it/s\n", now=5.0)
    assert [text for _, text, _ in seen[4:]] == [" 33%|### | 3/9 [00:03<00:06,  1.03it/s]", "done it/s"]
    summary = scanner.summary()
    assert summary.lines == 3 and summary.tail[-2].text.endswith("1.02it/s]")


def test_a_redrawn_line_keeps_only_its_last_redraw_in_memory() -> None:
    scanner = LineScanner(lambda n, text, t: None, (b"it/s",))
    for i in range(20000):
        scanner.feed(f"\r{i}/20000 [00:00<00:00, 9.0it/s]".encode(), now=float(i))
    assert len(scanner._rest) < 100
    scanner.finish(now=1.0)
    assert scanner.summary().tail[-1].text == "19999/20000 [00:00<00:00, 9.0it/s]"
