"""Log ingestion: how fast the launcher's log reader takes an NCCL_DEBUG=INFO flood, in how much memory.

Generates an NCCL_DEBUG=INFO-like log (default 1 GiB, in a temporary folder, deleted afterwards)
with SkyRL progress lines (ANSI colours, Ray prefixes), memory lines and a few errors mixed in,
then measures:

- ``scanner``: the file read in 1 MiB chunks through ``LineScanner`` + ``ProgressTracker``
  (the parsing alone);
- ``pump``: a real ``cat`` process writing the file into a pipe, read by ``LogPump``, which
  appends every byte to an ``output.log`` and parses it (the path a trial's output takes);
- ``classify`` (when ``nccl_tune.diagnose`` is installed): the post-mortem classifier over the
  same file, as run on a failed trial;
- ``classify unique``: the classifier over a log of the same size whose lines never repeat
  (timestamps, hex addresses, request ids and words that differ on every line), so that no
  per-line cache can help;
- ``... long line``: the scanner and the classifier over a log holding one 300 MB line without a
  newline between progress lines (kept: its first 64 KiB and a ``[... N bytes cut]`` marker); the
  target there is also a memory growth under ``LONG_LINE_GROWTH_MIB``.

For each: MB/s, peak RSS of this process and its growth over the run (bounded memory means the
growth does not scale with the log), and whether every progress line was found.

    python benchmarks/ingest.py [--size-mb 1024] [--long-line-mb 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from nccl_tune.launchers.logstream import LineScanner, LogPump
from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.trial import ProgressRules

MB = 1_000_000
TARGET_MB_S = 100.0
CHUNK = 1 << 20
LONG_LINE_GROWTH_MIB = 100.0

NCCL_LINES = (
    "{host}:{pid}:{tid} [{r}] NCCL INFO Channel {c:02d}/0 : {r}[{r}] -> {n}[{n}] via P2P/CUMEM/read",
    "{host}:{pid}:{tid} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "{host}:{pid}:{tid} [{r}] NCCL INFO comm 0x{comm:x} rank {r} nRanks 8 nNodes 1 localRanks 8 localRank {r} MNNVL 0",
    "{host}:{pid}:{tid} [{r}] NCCL INFO AllGather: opCount {op:x} sendbuff 0x{comm:x} recvbuff 0x{comm:x} count 68125120 datatype 7 op 0 root 0 comm 0x{comm:x} [nranks=8] stream 0x{tid:x}",
    "{host}:{pid}:{tid} [{r}] NCCL INFO ReduceScatter: opCount {op:x} sendbuff 0x{comm:x} recvbuff 0x{comm:x} count 8515640 datatype 7 op 0 root 0 comm 0x{comm:x} [nranks=8] stream 0x{tid:x}",
    "{host}:{pid}:{tid} [{r}] NCCL INFO Trees [0] {n}/-1/-1->{r}->{p} [1] {n}/-1/-1->{r}->{p}",
    "{host}:{pid}:{tid} [{r}] NCCL INFO NVLS multicast support is available on dev {r}",
)
PROGRESS = (
    "\x1b[36m(skyrl_entrypoint pid={pid})\x1b[0m \x1b[32m2026-03-02 10:11:12.345\x1b[0m | \x1b[1mINFO    \x1b[0m | "
    "\x1b[36mskyrl_train.trainer\x1b[0m:\x1b[36mtrain\x1b[0m:\x1b[36m209\x1b[0m - \x1b[1m{msg}\x1b[0m"
)
ERROR = "(FSDPPolicyWorkerBase pid={pid}) [rank{r}]:[W302 10:11:12.345678 ProcessGroupNCCL.cpp:1234] Warning: error {op} ignored"


@dataclass(frozen=True)
class Row:
    """One measurement."""

    path: str
    mb: float
    seconds: float
    mb_per_s: float
    rss_start_mib: float
    rss_peak_mib: float
    rss_growth_mib: float
    steps_found: int | None
    steps_written: int
    meets_target: bool


def generate(path: Path, size_mb: float, seed: int = 0) -> int:
    """Write the log; return how many step lines it holds. A ~4 MB block of varied lines is
    rendered once and repeated, with a progress block between repeats."""
    rnd = random.Random(seed)
    lines = []
    for i in range(40_000):
        r = rnd.randrange(8)
        tmpl = NCCL_LINES[rnd.randrange(len(NCCL_LINES))]
        lines.append(
            tmpl.format(
                host="gpu-node-3",
                pid=4000 + r,
                tid=4100 + r,
                r=r,
                n=(r + 1) % 8,
                p=(r - 1) % 8,
                c=i % 32,
                comm=0x55D2C1A0 + r,
                op=i,
            )
        )
        if i % 10_000 == 5_000:
            lines.append(ERROR.format(pid=959049, r=r, op=i))
    block = ("\n".join(lines) + "\n").encode()
    steps = 0
    written = 0
    with open(path, "wb", buffering=CHUNK) as fh:
        while written < size_mb * MB:
            fh.write(block)
            progress = [
                PROGRESS.format(pid=645566, msg="Started: 'step'"),
                PROGRESS.format(pid=645566, msg="Started: 'generate'"),
            ]
            progress.append(PROGRESS.format(pid=645566, msg=f"Finished: 'generate', time cost: {1200 + steps % 7}.12s"))
            progress += [
                f"(FSDPPolicyWorkerBase pid={959049 + g}) rank {g} step {steps} memory: 61.{g}0GiB(77.1%)"
                for g in range(8)
            ]
            progress.append(PROGRESS.format(pid=645566, msg=f"Finished: 'step', time cost: {1300 + steps % 5}.50s"))
            data = ("\n".join(progress) + "\n").encode()
            fh.write(data)
            written += len(block) + len(data)
            steps += 1
    return steps


UNIQUE_LINE = "{ts} {level} {host}:{pid} [{module}:{line}] {words} addr=0x{addr:012x} req={req:08x}\n"


def generate_unique(path: Path, size_mb: float, seed: int = 1) -> int:
    """Write a log whose lines never repeat; return how many step lines it holds. A ~8 MB block of
    random lines is written again and again with its lower-case letters permuted differently each
    time (words, hex digits and ids change; no line comes back), with progress lines between."""
    rnd = random.Random(seed)
    vocab = [
        "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 10))) for _ in range(20_000)
    ]
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARNING")
    lines = []
    for i in range(60_000):
        lines.append(
            UNIQUE_LINE.format(
                ts=f"2026-03-02 10:{(i // 60) % 60:02d}:{i % 60:02d}.{rnd.randrange(10**6):06d}",
                level=rnd.choice(levels),
                host=f"gpu-{rnd.choice(vocab)}",
                pid=rnd.randrange(1000, 99999),
                module=rnd.choice(vocab),
                line=rnd.randrange(9999),
                words=" ".join(rnd.choice(vocab) for _ in range(rnd.randint(6, 14))),
                addr=rnd.getrandbits(48),
                req=rnd.getrandbits(32),
            )
        )
    block = "".join(lines).encode()
    letters = b"abcdefghijklmnopqrstuvwxyz"
    steps = written = 0
    with open(path, "wb", buffering=CHUNK) as fh:
        while written < size_mb * MB:
            perm = bytes(rnd.sample(letters, len(letters)))
            data = block.translate(bytes.maketrans(letters, perm))
            data += (
                PROGRESS.format(pid=645566, msg=f"Finished: 'step', time cost: {1300 + steps % 5}.50s") + "\n"
            ).encode()
            fh.write(data)
            written += len(data)
            steps += 1
    return steps


def generate_long_line(path: Path, line_mb: float) -> int:
    """A log with one ``line_mb`` MB line without a newline between two steps; return 2 (steps)."""
    step = PROGRESS.format(pid=645566, msg="Finished: 'step', time cost: 12.50s") + "\n"
    with open(path, "wb", buffering=CHUNK) as fh:
        fh.write(step.encode())
        blob = b"0123456789abcdef" * (CHUNK // 16)
        for _ in range(int(line_mb * MB) // CHUNK):
            fh.write(blob)
        fh.write(b"\n" + step.encode())
    return 2


class RssWatch:
    """Peak RSS of this process while a measurement runs."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.start_mib = self._proc.memory_info().rss / 2**20
        self.peak_mib = self.start_mib
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mib = max(self.peak_mib, self._proc.memory_info().rss / 2**20)

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, self._proc.memory_info().rss / 2**20)


def _row(path: str, size: int, seconds: float, rss: RssWatch, found: int | None, written: int) -> Row:
    mb_s = size / MB / seconds
    return Row(
        path,
        round(size / MB, 1),
        round(seconds, 3),
        round(mb_s, 1),
        round(rss.start_mib, 1),
        round(rss.peak_mib, 1),
        round(rss.peak_mib - rss.start_mib, 1),
        found,
        written,
        mb_s >= TARGET_MB_S and (found is None or found == written),
    )


def _long(row: Row) -> Row:
    from dataclasses import replace

    return replace(
        row, path=f"{row.path}, long line", meets_target=row.meets_target and row.rss_growth_mib < LONG_LINE_GROWTH_MIB
    )


def bench_scanner(log: Path, steps: int) -> Row:
    tracker = ProgressTracker(ProgressRules())
    scanner = LineScanner(tracker.feed, tracker.current_literals)
    with RssWatch() as rss:
        t0 = time.perf_counter()
        with open(log, "rb", buffering=0) as fh:
            while chunk := fh.read(CHUNK):
                scanner.feed(chunk)
        scanner.finish()
        seconds = time.perf_counter() - t0
    return _row("scanner", scanner.bytes, seconds, rss, len(tracker.snapshot().step_times_s), steps)


def bench_pump(log: Path, steps: int, out_dir: Path) -> Row:
    tracker = ProgressTracker(ProgressRules())
    scanner = LineScanner(tracker.feed, tracker.current_literals)
    out = out_dir / "output.log"
    with RssWatch() as rss:
        t0 = time.perf_counter()
        proc = subprocess.Popen(["cat", str(log)], stdout=subprocess.PIPE)
        pump = LogPump(proc.stdout.fileno(), out, scanner)
        pump.start()
        proc.wait()
        pump.join()
        seconds = time.perf_counter() - t0
    proc.stdout.close()
    if pump.error is not None:
        raise pump.error
    if out.stat().st_size != log.stat().st_size:
        raise SystemExit(f"output.log has {out.stat().st_size} bytes, the source {log.stat().st_size}")
    out.unlink()
    return _row("pump", scanner.bytes, seconds, rss, len(tracker.snapshot().step_times_s), steps)


def bench_classify(log: Path, steps: int, name: str = "classify") -> Row | None:
    try:
        from nccl_tune.diagnose.verdict import classify_file
    except ImportError:
        return None
    with RssWatch() as rss:
        t0 = time.perf_counter()
        classify_file(log, exit_code=1)
        seconds = time.perf_counter() - t0
    return _row(name, log.stat().st_size, seconds, rss, None, steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=float, default=1024.0, help="size of the generated log (default 1024)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--tmp-dir", type=Path, default=None, help="where to write the generated log")
    p.add_argument("--skip-classify", action="store_true", help="do not time the diagnose classifier")
    p.add_argument("--long-line-mb", type=float, default=300.0, help="size of the one-line log (0: skip it)")
    args = p.parse_args(argv)

    console = Console(width=120)
    work = Path(tempfile.mkdtemp(prefix="nccl-tune-ingest-", dir=args.tmp_dir))
    try:
        log = work / "nccl_info.log"
        t0 = time.perf_counter()
        steps = generate(log, args.size_mb)
        console.print(f"generated {log.stat().st_size / MB:.0f} MB ({steps} steps) in {time.perf_counter() - t0:.1f} s")
        rows = [bench_scanner(log, steps), bench_pump(log, steps, work)]
        if not args.skip_classify:
            row = bench_classify(log, steps)
            if row is not None:
                rows.append(row)
                log.unlink()
                unique = work / "unique.log"
                unique_steps = generate_unique(unique, args.size_mb)
                rows.append(bench_classify(unique, unique_steps, "classify unique"))
                unique.unlink()
        if args.long_line_mb > 0:
            long_log = work / "long_line.log"
            long_steps = generate_long_line(long_log, args.long_line_mb)
            rows.append(_long(bench_scanner(long_log, long_steps)))
            row = None if args.skip_classify else bench_classify(long_log, long_steps)
            if row is not None:
                rows.append(_long(row))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title=f"log ingestion (target >= {TARGET_MB_S:g} MB/s, bounded memory)")
    for col in ("path", "MB", "s", "MB/s", "RSS start MiB", "RSS peak MiB", "growth MiB", "steps found", "target"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for r in rows:
        found = "-" if r.steps_found is None else f"{r.steps_found}/{r.steps_written}"
        table.add_row(
            r.path,
            f"{r.mb:.0f}",
            f"{r.seconds:.2f}",
            f"{r.mb_per_s:.0f}",
            f"{r.rss_start_mib:.0f}",
            f"{r.rss_peak_mib:.0f}",
            f"{r.rss_growth_mib:.1f}",
            found,
            "yes" if r.meets_target else "NO",
        )
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "benchmark": "ingest",
            "size_mb": args.size_mb,
            "long_line_mb": args.long_line_mb,
            "target_mb_per_s": TARGET_MB_S,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "rows": [asdict(r) for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0 if all(r.meets_target for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
