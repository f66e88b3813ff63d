"""A trainer whose step lines come late: it writes them into a block buffer that reaches the pipe
only at exit. ``--stdio`` buffers whatever ``PYTHONUNBUFFERED`` says (as a C program's stdio
does); without it, plain ``print`` (buffered unless ``PYTHONUNBUFFERED`` or ``-u``). ``--stamp``
starts each line with a loguru-style timestamp. ``trainer.micro=N`` makes steps N times faster.
Prints ``train step N done`` for 6 steps of 0.2 s, then ``training over``."""

import io
import sys
import time


def main() -> int:
    micro, stdio, stamp = 1, "--stdio" in sys.argv, "--stamp" in sys.argv
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        if key == "trainer.micro":
            micro = int(value)
    out = sys.stdout
    if stdio:
        out = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), buffer_size=1 << 16))
    for step in range(1, 7):
        time.sleep(0.2 / micro)
        now = time.time()
        pre = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d} | INFO | "
        out.write(f"{pre if stamp else ''}train step {step} done\n")
    out.write("training over\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
