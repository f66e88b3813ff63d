"""Over-long lines: cut to their head with a marker, for any chunking, and only when needed."""

from __future__ import annotations

import random
import re

from nccl_tune.diagnose.lines import LineCutter


def _reference(data: bytes, limit: int) -> bytes:
    out = []
    for piece in re.split(rb"([\r\n])", data):
        if piece in (b"\r", b"\n") or len(piece) <= limit:
            out.append(piece)
        else:
            out.append(piece[:limit] + f" [... {len(piece) - limit} bytes cut]".encode())
    return b"".join(out)


def test_any_chunking_cuts_exactly_the_over_long_lines() -> None:
    rnd = random.Random(7)
    for _ in range(3000):
        limit = rnd.choice([1, 2, 3, 5, 8, 16])
        lengths = [
            rnd.choice([0, 1, limit - 1, limit, limit + 1, 2 * limit, 3 * limit + 2, rnd.randint(0, 40)])
            for _ in range(rnd.randint(0, 8))
        ]
        data = b"".join(b"x" * n + rnd.choice([b"\n", b"\r"]) for n in lengths) + b"x" * rnd.choice([0, 2 * limit])
        cutter, out, i = LineCutter(limit), [], 0
        while i < len(data):
            k = rnd.randint(1, 3 * limit)
            out.append(cutter.cut(data[i : i + k]))
            i += k
        out.append(cutter.flush())
        assert b"".join(out) == _reference(data, limit), (limit, data)


def test_a_chunk_without_long_lines_passes_uncopied() -> None:
    chunk = b"short line\n" * 10_000
    assert LineCutter(64).cut(chunk) is chunk


def test_diagnose_blocks_keep_the_head_of_an_over_long_line() -> None:
    from nccl_tune.diagnose.scan import whole_lines

    data = b"first\n" + b"y" * 200_000 + b"\nRuntimeError: after the blob\n" + b"z" * 70_000
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    lines = b"".join(whole_lines(chunks)).split(b"\n")
    assert lines[0] == b"first" and lines[2] == b"RuntimeError: after the blob"
    assert lines[1] == b"y" * 65536 + f" [... {200_000 - 65536} bytes cut]".encode()
    assert lines[3] == b"z" * 65536 + f" [... {70_000 - 65536} bytes cut]".encode()


def test_a_progress_bar_redrawn_with_carriage_returns_is_not_cut() -> None:
    bar = b"".join(f"\r{i}/20000 [00:00<00:00, 9.0it/s]".encode() for i in range(20000))
    assert LineCutter(1024).cut(bar) is bar
