"""The tool on a real GPU: NVML, CUDA out-of-memory, NCCL's own report and the memory model.

Runs ``examples/gpu_train.py`` (a 0.94 B-parameter transformer on CUDA under ``torchrun
--nproc-per-node 1``, NCCL) through nccl-tune and writes what the hardware showed, with the node's
fingerprint, to a JSON file kept in the repository (``benchmarks/results/gpu-<gpu>.json``), so that
a later change can be compared with it (``--compare``). Stages, in order, each written to the JSON
as soon as it ends (a stage that fails records its error; the others still run):

- ``hardware``: the fingerprint the tool records (GPU, driver, CUDA, torch, NCCL:
  ``nightly.fingerprint``) next to what torch itself reports (its CUDA and NCCL versions, the device);
- ``doctor``: ``nccl-tune doctor --json`` on the node, every check's status and detail;
- ``study``: ``nccl-tune run`` over ``examples/gpu_train.yaml`` for ``--trials`` trials and one
  confirmation. Per launched trial: its class, values, tokens per second, NVML's peak next to the
  job's own ``torch.cuda.max_memory_reserved()`` (read from its lines by the tool's progress reader;
  the difference is what CUDA's context, NCCL and the driver hold outside PyTorch's allocator), for an
  OOM the size PyTorch asked for and the demand the tool read from the message, and NCCL's ``set by
  environment`` report (``nccl_env_seen``) against what the trial set; the study's dropped parameters
  and its hardware record;
- ``gate``: NVML sampled every ``SAMPLE_S`` through the study: for each launch after the first, the
  memory in use at the launch against the gate's baseline, and how long before it the previous
  trial's memory came back;
- ``memory_model``: for each launched trial, the peak the study's memory model
  (``tuner.search.memory_model``) predicted from the trials before it against the peak NVML measured
  (error as a share of the GPU), the first OOM's prediction, and the study's prediction for the
  ``oom`` stage's config;
- ``oom``: one trial pinned to the largest micro-batch without checkpointing (32 x 4096 tokens) and
  to NCCL values, with the NCCL check on: its class, the size PyTorch asked for, the demand, seconds
  from launch to the end, NCCL's report;
- ``hang``: one trial whose rank sleeps inside step 3 (``--stall-at-step``) holding its memory, run
  through ``LocalLauncher`` with a ``HANG_STALL_S`` stall timeout: the verdict, seconds from the last
  progress line to it, py-spy's stack of the CUDA process, teardown, survivors, and NVML afterwards
  (memory back at the baseline, no process left on the GPU).

Targets (exit 1 when one is missed, 0 when all are met): a real CUDA OOM classified ``oom`` with the
size asked for; NVML's peak 0-``OUTSIDE_ALLOCATOR_MAX_GIB`` GiB above the job's reserved memory
(baseline excluded); memory back before every launch; every NCCL value reported equal to the trial's
and no reported parameter dropped; the hardware record naming GPU, driver, CUDA and NCCL (the NCCL
version the one torch runs); the hang found within the stall timeout + 2 s, torn down within grace +
2 s with no survivor and nothing left on the GPU, rank 0's stack in the job's ``stall``; doctor's
``gpu.visible`` check passing and naming the GPU. The memory model's errors are measured, not
judged. Without a CUDA device it prints one line and exits 2.

    python benchmarks/gpu.py [--json PATH] [--work DIR] [--trials 9] [--compare FILE]
    python benchmarks/gpu.py --show FILE [--compare FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the GPU node runs the checkout as it is, never installed

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

JOB_SCRIPT = REPO / "examples" / "gpu_train.py"
SPACE = REPO / "examples" / "gpu_train.yaml"
JOB = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(JOB_SCRIPT)]
CLI = [sys.executable, "-m", "nccl_tune.cli"]
RESULTS = REPO / "benchmarks" / "results"
GIB = float(1 << 30)
SAMPLE_S = 0.1
GATE_TOLERANCE_GIB = 1.0
"""The local launcher's default gate tolerance: used memory within this of the baseline is back."""
OUTSIDE_ALLOCATOR_MAX_GIB = 4.0
HANG_STALL_S = 10.0
HANG_GRACE_S = 5.0
MARGIN_S = 2.0
STOP_WAIT_S = 60.0
STUDY_BUDGET = "4m"
"""No new trial after this: the whole run stays near five minutes on one H200 (GPU time is scarce)."""
OOM_VALUES = {
    "micro_batch_size": 32,
    "seq_len": 4096,
    "activation_checkpointing": False,
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_BUFFSIZE": 4194304,
}
"""The pinned trial: the largest micro-batch without checkpointing, and NCCL values set (NCCL comes up
before the first forward, so its report is in the log of a run that dies there)."""
OOM_NCCL_CHECK = "on"
"""The OOM trial runs after the NCCL check of its values: the check's first run on a real GPU."""
NCCL_PARAMS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE")
_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ?([KMGT]?i?B)")
_UNIT_GIB = {"B": 1 / GIB, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2**10}


class NoCuda(Exception):
    """This machine shows no CUDA device: the benchmark cannot run here."""


def child_env() -> dict[str, str]:
    """This environment, with the checkout importable by the processes the benchmark starts."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("COLUMNS", "200")
    return env


# -- hardware ------------------------------------------------------------------------------------
TORCH_FACTS = """
import json, torch
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available()}
if out["available"]:
    p = torch.cuda.get_device_properties(0)
    out.update(device=p.name, total_gib=p.total_memory / 2**30, capability=f"{p.major}.{p.minor}",
               devices=torch.cuda.device_count(), nccl=".".join(map(str, torch.cuda.nccl.version())))
print(json.dumps(out))
"""


def torch_facts() -> dict[str, Any]:
    """What torch reports of the device, asked in a child process (a CUDA context here would hold
    memory through every measurement). ``NoCuda`` when torch sees no device."""
    done = subprocess.run(
        [sys.executable, "-c", TORCH_FACTS], capture_output=True, text=True, timeout=120, env=child_env()
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise NoCuda(f"torch could not be asked about CUDA ({last})")
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    if not facts["available"]:
        built = f"built for CUDA {facts['cuda']}" if facts["cuda"] else "a CPU build"
        raise NoCuda(f"no CUDA device visible (torch {facts['torch']}, {built})")
    return facts


def stage_hardware() -> dict[str, Any]:
    from nccl_tune.nightly.fingerprint import probe_fingerprint

    fp = probe_fingerprint(JOB, REPO)
    return {"fingerprint": fp.to_json(), "summary": fp.summary(), "torch": torch_facts()}


def stage_doctor() -> dict[str, Any]:
    done = subprocess.run([*CLI, "doctor", "--json"], capture_output=True, text=True, timeout=120, env=child_env())
    report = json.loads(done.stdout)
    return {"exit_code": done.returncode, "checks": report["checks"]}


# -- NVML through the run ------------------------------------------------------------------------
class NvmlTimeline(threading.Thread):
    """Used memory of every GPU, sampled every ``SAMPLE_S`` with wall-clock stamps, until stopped."""

    def __init__(self) -> None:
        super().__init__(name="nvml-timeline", daemon=True)
        from nccl_tune.gpu import open_probe

        self.probe = open_probe()
        self.samples: list[tuple[float, float]] = []
        """(time.time(), used GiB summed over the GPUs)."""
        self._halt = threading.Event()

    @property
    def available(self) -> bool:
        return self.probe.available

    def used_gib(self) -> float:
        return sum(u.used_gib for u in self.probe.usage())

    def run(self) -> None:
        while not self._halt.is_set():
            if self.available:
                self.samples.append((time.time(), self.used_gib()))
            self._halt.wait(SAMPLE_S)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def between(self, t0: float, t1: float) -> list[tuple[float, float]]:
        return [(t, u) for t, u in self.samples if t0 <= t <= t1]


# -- reading a trial -----------------------------------------------------------------------------
def job_memory(log: Path) -> dict[str, float | None]:
    """The job's own figure, as the tool's progress reader reads its lines: the highest
    ``max_memory_reserved`` it printed (GiB) and the GPU's size its percentage gives."""
    from nccl_tune.launchers.progress import ProgressTracker
    from nccl_tune.presets import PRESETS

    tracker = ProgressTracker(PRESETS["torchtitan"], start_t=0.0)
    if log.is_file():
        with open(log, encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh):
                tracker.feed(i, line.rstrip("\n"), 0.0)
    state = tracker.snapshot()
    return {"reserved_gib": state.memory_peak_gib.get(None), "total_gib": state.memory_total_gib.get(None)}


def tried_gib(log: Path) -> tuple[str | None, float | None]:
    """The size PyTorch's out-of-memory message says it tried to allocate (text, GiB)."""
    if not log.is_file():
        return None, None
    m = _TRIED.search(log.read_text(encoding="utf-8", errors="replace"))
    if m is None:
        return None, None
    return f"{m.group(1)} {m.group(2)}", float(m.group(1)) * _UNIT_GIB.get(m.group(2), 1.0)


def oom_facts(result: Any, log: Path) -> dict[str, Any]:
    """What an OOM trial shows: the size asked for, the demand the tool reads, the evidence."""
    from nccl_tune.oom_demand import oom_demand

    texts = [e.text for e in result.verdict.evidence]
    demand = oom_demand(texts)
    tried_text, tried = tried_gib(log)
    return {
        "tried": tried_text,
        "tried_gib": tried,
        "needed_gib": None if demand is None else round(demand.needed_gib, 2),
        "capacity_gib": None if demand is None else round(demand.capacity_gib, 2),
        "needed_frac": None if demand is None else round(demand.needed_frac, 3),
        "evidence": next((t for t in texts if "out of memory" in t.lower()), texts[0] if texts else None),
        "advice": result.verdict.advice,
    }


def nccl_facts(env: Mapping[str, Any], seen: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """What the trial set of the space's NCCL variables against what NCCL reported reading."""
    from nccl_tune.diagnose.nccl_seen import same_value

    set_values = {n: env.get(n) for n in NCCL_PARAMS}
    reported = sorted({n for values in seen.values() for n in values if n in NCCL_PARAMS})
    differ = sorted(
        {n for values in seen.values() for n, v in values.items() if n in NCCL_PARAMS and not same_value(env.get(n), v)}
    )
    return {
        "set": set_values,
        "seen": {rank: dict(values) for rank, values in seen.items()},
        "reported": reported,
        "differ": differ,
        "set_not_reported": sorted(n for n, v in set_values.items() if v is not None and n not in reported),
        "debug": {k: env.get(k) for k in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")},
    }


def trial_row(record: Any) -> dict[str, Any]:
    """One launched trial of a stored study, as the JSON keeps it."""
    result = record.result
    trial_dir = Path(record.trial_dir or result.trial_dir)
    spec = json.loads((trial_dir / "spec.json").read_text())
    log = trial_dir / "output.log"
    mem = result.memory
    gpu = mem.gpus[0] if mem is not None and mem.gpus else None
    job = job_memory(log)
    row = {
        "number": record.number,
        "kind": record.kind.value,
        "values": dict(record.values),
        "status": result.status.value,
        "stop_reason": result.stop_reason.value,
        "exit_code": result.exit_code,
        "wall_s": round(result.wall_s, 2),
        "steps": len(result.step_times_s),
        "throughput": None if result.throughput_per_s is None else round(result.throughput_per_s, 1),
        "throughput_unit": result.throughput_unit,
        "memory_source": None if mem is None else mem.source,
        "nvml_peak_gib": None if gpu is None else round(gpu.peak_gib, 3),
        "nvml_baseline_gib": None if gpu is None else round(gpu.baseline_gib, 3),
        "gpu_total_gib": None if gpu is None else round(gpu.total_gib, 3),
        "peak_frac": None if mem is None or mem.max_peak_frac is None else round(mem.max_peak_frac, 4),
        "job_reserved_gib": job["reserved_gib"],
        "job_total_gib": None if job["total_gib"] is None else round(job["total_gib"], 2),
        "outside_allocator_gib": None,
        "nccl": nccl_facts(spec.get("env") or {}, result.nccl_env_seen),
        "launched_at": (trial_dir / "spec.json").stat().st_mtime,
        "ended_at": (trial_dir / "result.json").stat().st_mtime,
        "trial_dir": str(trial_dir),
    }
    if gpu is not None and job["reserved_gib"] is not None:
        row["outside_allocator_gib"] = round(gpu.peak_gib - gpu.baseline_gib - job["reserved_gib"], 3)
    if result.status.value == "oom":
        row["oom"] = oom_facts(result, log)
    return row


# -- the study -----------------------------------------------------------------------------------
def interrupt(proc: subprocess.Popen, wait_s: float = STOP_WAIT_S) -> None:
    """Stop a child as Ctrl-C would (nccl-tune tears its running trial down and records it), then
    kill it if it is still there after ``wait_s``: a killed tuner would leave its trial running."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_cli(args: list[str], log: Path, timeout_s: float) -> tuple[int, dict[str, Any] | None, float]:
    """``nccl-tune ARGS``: (exit code, its ``--json`` summary or None, seconds); stderr to ``log``.
    Past ``timeout_s`` it is interrupted, and what its study recorded is still read."""
    t0 = time.monotonic()
    with open(log, "w") as err:
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=err, text=True, env=child_env())
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            interrupt(proc)
            out = proc.stdout.read() if proc.stdout else ""
        except BaseException:
            interrupt(proc)
            raise
    try:
        summary = json.loads(out) if out.strip() else None
    except ValueError:
        summary = None
    return proc.returncode, summary, round(time.monotonic() - t0, 1)


def open_stored(results: Path, study: str, log: Path | None = None):  # noqa: ANN201 - StoredStudy
    """The study as its storage holds it; when there is none, the error names the run's last words."""
    from nccl_tune.errors import NcclTuneError
    from nccl_tune.tuner.winner.study_view import open_study

    try:
        return open_study(f"sqlite:///{results / 'nccl-tune.db'}", study)
    except NcclTuneError as exc:
        said = log.read_text(errors="replace").strip().splitlines() if log is not None and log.is_file() else []
        raise RuntimeError(f"{exc}; nccl-tune run said: {said[-1] if said else 'nothing'}") from None


def launched(stored: Any) -> list[Any]:
    from nccl_tune.tuner.records.study_records import Outcome

    return [r for r in stored.records if r.outcome is Outcome.LAUNCHED and r.result is not None]


def stage_study(work: Path, trials: int) -> dict[str, Any]:
    results = work / "study"
    args = [
        "run", "--space", str(SPACE), "--study", "gpu", "--results", str(results),
        "--storage", f"sqlite:///{results / 'nccl-tune.db'}", "--trials", str(trials), "--confirm", "1",
        "--steps", "3", "--seed", "0", "--nccl-check", "off", "--budget", STUDY_BUDGET,
        "--startup-timeout", "90s", "--trial-timeout", "150s", "--json", "-o", str(work / "tuned.yaml"),
        "--", *JOB,
    ]  # fmt: skip
    results.mkdir(parents=True, exist_ok=True)
    code, summary, wall = run_cli(args, work / "study.log", timeout_s=330)
    stored = open_stored(results, "gpu", work / "study.log")
    rows = [trial_row(r) for r in launched(stored)]
    predicted = [
        {"number": r.number, "values": dict(r.values), "like_trial": r.predicted_from}
        for r in stored.records
        if r.predicted_from is not None
    ]
    return {
        "command": ["nccl-tune", *args],
        "exit_code": code,
        "wall_s": wall,
        "best": (summary or {}).get("best"),
        "trials": rows,
        "not_launched_predicted": predicted,
        "dropped": dict(stored.dropped),
        "hardware_record": {k: v for k, v in (stored.hardware or {}).items() if k != "fingerprint"},
    }


def gate_gaps(rows: list[dict[str, Any]], timeline: NvmlTimeline) -> list[dict[str, Any]]:
    """For each launch after the first: memory at the launch against the baseline, and how long
    before the launch the previous trial's memory was last seen held."""
    out = []
    ordered = sorted(rows, key=lambda r: r["launched_at"])
    for prev, nxt in zip(ordered, ordered[1:]):
        base = nxt["nvml_baseline_gib"]
        window = timeline.between(prev["launched_at"], nxt["launched_at"])
        if base is None or not window:
            out.append({"after": prev["number"], "before": nxt["number"], "note": "no NVML samples"})
            continue
        held = [t for t, used in window if used > base + GATE_TOLERANCE_GIB]
        at_launch = window[-1][1]
        out.append(
            {
                "after": prev["number"],
                "before": nxt["number"],
                "baseline_gib": base,
                "peak_gib": round(max(u for _, u in window), 2),
                "used_at_launch_gib": round(at_launch, 3),
                "back_at_launch": at_launch <= base + GATE_TOLERANCE_GIB,
                "held_after_end_s": round(held[-1] - prev["ended_at"], 2) if held else None,
                "back_before_launch_s": round(nxt["launched_at"] - held[-1], 2) if held else None,
            }
        )
    return out


def stage_memory_model(work: Path, oom_values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Each launched trial's predicted peak from the trials before it, against its measured peak."""
    from nccl_tune.tuner.search.memory_model import MemoryModel

    stored = open_stored(work / "study", "gpu")
    rows, first_oom = [], None
    for r in launched(stored):
        model = MemoryModel(stored.space, [q for q in stored.records if q.number < r.number])
        pred = model.predict(r.values)
        verdict = model.verdict(r.values)
        measured = r.result.memory.max_peak_frac if r.result.memory is not None else None
        row = {
            "number": r.number,
            "status": r.status.value,
            "predicted_frac": None if pred.peak_frac is None else round(pred.peak_frac, 4),
            "sigma_log": round(pred.sigma_log, 3) if pred.known else None,
            "p_fits": round(model.p_fits(r.values), 3),
            "anchor": pred.anchor,
            "measured_frac": None if measured is None else round(measured, 4),
            "error_frac": None,
            "refused_by_model": verdict.reason if verdict is not None else None,
        }
        if r.status.value == "ok" and pred.peak_frac is not None and measured is not None:
            row["error_frac"] = round(pred.peak_frac - measured, 4)
        rows.append(row)
        if r.status.value == "oom" and first_oom is None:
            first_oom = row
    errors = [abs(r["error_frac"]) for r in rows if r["error_frac"] is not None and r["anchor"] is not None]
    out = {
        "per_trial": rows,
        "median_abs_error_frac": round(statistics.median(errors), 4) if errors else None,
        "max_abs_error_frac": round(max(errors), 4) if errors else None,
        "first_oom": first_oom,
    }
    if oom_values is not None:
        model = MemoryModel(stored.space, stored.records)
        pred, verdict = model.predict(oom_values), model.verdict(oom_values)
        out["oom_stage_config"] = {
            "values": dict(oom_values),
            "predicted_frac": None if pred.peak_frac is None else round(pred.peak_frac, 4),
            "p_fits": round(model.p_fits(oom_values), 3),
            "refused_by_model": verdict.reason if verdict is not None else None,
        }
    return out


def stage_oom(work: Path) -> dict[str, Any]:
    results = work / "oom"
    pins = [a for k, v in OOM_VALUES.items() for a in ("--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}")]
    args = [
        "run", "--space", str(SPACE), "--study", "gpu-oom", "--results", str(results),
        "--storage", f"sqlite:///{results / 'nccl-tune.db'}", *pins, "--trials", "1", "--confirm", "0",
        "--nccl-check", OOM_NCCL_CHECK, "--startup-timeout", "90s", "--trial-timeout", "120s", "--json", "--", *JOB,
    ]  # fmt: skip
    results.mkdir(parents=True, exist_ok=True)
    code, _, wall = run_cli(args, work / "oom.log", timeout_s=180)
    stored = open_stored(results, "gpu-oom", work / "oom.log")
    (record,) = launched(stored)
    row = trial_row(record)
    row["nccl_check_s"] = round(record.result.nccl_check_s, 2)
    row["nccl_check_failed"] = record.result.nccl_check_failed
    return {
        "command": ["nccl-tune", *args],
        "exit_code": code,
        "wall_s": wall,
        "trial": row,
        "dropped": dict(stored.dropped),
    }


# -- a stalled rank ------------------------------------------------------------------------------
class HangWatch:
    """Times a trial through the launcher's observer calls and, after the verdict, watches for the
    trial's processes to be gone and NVML's memory to come back (``base_gib`` + tolerance)."""

    def __init__(self, timeline: NvmlTimeline, base_gib: float | None) -> None:
        from nccl_tune.launchers.base import TrialObserver

        watch = self

        class Observer(TrialObserver):
            def should_stop(self, spec, progress):  # noqa: ANN001, ANN202
                if progress.step_times_s:
                    watch.last_progress = time.monotonic() - progress.last_progress_s
                return None

            def on_stopping(self, spec, reason, detail):  # noqa: ANN001, ANN202
                watch.stopping = time.monotonic()
                watch._thread = threading.Thread(target=watch._until_gone, args=(spec.marker,), daemon=True)
                watch._thread.start()

        self.observer = Observer()
        self.timeline, self.base_gib = timeline, base_gib
        self.last_progress: float | None = None
        self.stopping: float | None = None
        self.gone: float | None = None
        self.gpu_back: float | None = None
        self._thread: threading.Thread | None = None

    def _until_gone(self, marker: str) -> None:
        from nccl_tune.launchers.teardown import find_marked

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (self.gone is None or self.gpu_back is None):
            if self.gone is None and not find_marked(marker.__eq__):
                self.gone = time.monotonic()
            if self.gpu_back is None and self.base_gib is not None and self.timeline.available:
                if self.timeline.used_gib() <= self.base_gib + GATE_TOLERANCE_GIB:
                    self.gpu_back = time.monotonic()
            time.sleep(0.02)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(70)

    def since_stop(self, t: float | None) -> float | None:
        return None if t is None or self.stopping is None else round(t - self.stopping, 3)


def rank_stack(trial_dir: Path) -> dict[str, Any]:
    """Rank 0's main-thread frames from ``stacks.json`` (innermost first), or why there are none."""
    from nccl_tune.diagnose.stacks import STACKS_FILE, StackReport

    path = trial_dir / STACKS_FILE
    report = StackReport.from_json(json.loads(path.read_text())) if path.is_file() else None
    if report is None:
        return {"note": "no stacks.json", "frames": []}
    ranked = [p for p in report.processes if p.rank == 0]
    proc = ranked[0] if ranked else None
    main = proc.main_thread if proc is not None else None
    return {
        "note": report.note,
        "processes": [
            {"pid": p.pid, "rank": p.rank, "command": p.command[:120], "error": p.error} for p in report.processes
        ],
        "frames": [str(f) for f in main.frames[:8]] if main is not None else [],
    }


def stage_hang(work: Path, timeline: NvmlTimeline) -> dict[str, Any]:
    from nccl_tune.launchers.local import LocalLauncher
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.trial import Clocks, StopRule, TrialSpec

    space = load_space(str(SPACE))
    clocks = Clocks(
        startup_timeout_s=120,
        stall_timeout_s=HANG_STALL_S,
        stall_floor_s=HANG_STALL_S,
        trial_timeout_s=300,
        grace_s=HANG_GRACE_S,
    )
    argv = [*JOB, "--micro-batch-size", "8", "--seq-len", "2048", "--stall-at-step", "3"]
    spec = TrialSpec(
        study="gpu-hang",
        number=0,
        params={},
        argv=argv,
        env={},
        trial_dir=work / "hang" / "trial-0000",
        clocks=clocks,
        stop=StopRule(1, 100),
        progress=space.progress,
        cwd=REPO,
    )
    launcher = LocalLauncher()
    launcher.before_study()
    base = sum((launcher.gpu_gate.baseline_gib or {}).values()) if launcher.probe.available else None
    watch = HangWatch(timeline, base)
    launcher.gate()
    result = launcher.run(spec, watch.observer)
    watch.join()
    try:
        processes = [{"pid": p.pid, "gpu": p.gpu_index, "used_gib": p.used_gib} for p in launcher.probe.processes()]
    except Exception as exc:  # NVML that lists no processes (some containers): said, not fatal
        processes = [{"error": f"{type(exc).__name__}: {exc}"}]
    used_after = timeline.used_gib() if timeline.available else None
    launcher.close()
    detect = None if watch.stopping is None or watch.last_progress is None else watch.stopping - watch.last_progress
    return {
        "argv_tail": argv[len(JOB) :],
        "status": result.status.value,
        "stop_reason": result.stop_reason.value,
        "headline": result.verdict.evidence[0].text if result.verdict.evidence else None,
        "evidence": [e.text for e in result.verdict.evidence][:8],
        "steps_before_stall": len(result.step_times_s),
        "stall_timeout_s": HANG_STALL_S,
        "detect_s": None if detect is None else round(detect, 3),
        "grace_s": HANG_GRACE_S,
        "teardown_s": watch.since_stop(watch.gone),
        "gpu_back_s": watch.since_stop(watch.gpu_back),
        "survivors": result.survivors,
        "escaped": result.escaped_processes,
        "peak_gib": None if result.peak_mem_gib is None else round(result.peak_mem_gib, 2),
        "baseline_gib": None if base is None else round(base, 3),
        "used_after_gib": None if used_after is None else round(used_after, 3),
        "gpu_processes_after": processes,
        "stack": rank_stack(spec.trial_dir),
    }


# -- targets -------------------------------------------------------------------------------------
def _all(rows: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> bool:
    return bool(rows) and all(test(r) for r in rows)


def targets(f: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    """(target, met, figure) for every target the figures can judge."""
    rows = (f.get("study") or {}).get("trials") or []
    oom = (f.get("oom") or {}).get("trial") or {}
    return [
        _oom_target(oom),
        _nvml_target(rows),
        _gate_target(f.get("gate") or []),
        _nccl_target(f, rows + ([oom] if oom else [])),
        _hardware_target(f),
        *_hang_targets(f.get("hang") or {}),
        _doctor_target(f),
    ]


def _oom_target(oom: Mapping[str, Any]) -> tuple[str, bool, str]:
    tried = (oom.get("oom") or {}).get("tried")
    return (
        "a CUDA OOM is classified oom with the size asked for",
        oom.get("status") == "oom" and bool(tried),
        f"{oom.get('status')}, tried {tried}",
    )


def _nvml_target(rows: list[dict[str, Any]]) -> tuple[str, bool, str]:
    ok = [r for r in rows if r["status"] == "ok" and r.get("outside_allocator_gib") is not None]
    spread = [r["outside_allocator_gib"] for r in ok]
    return (
        f"NVML's peak 0-{OUTSIDE_ALLOCATOR_MAX_GIB:g} GiB above max_memory_reserved",
        _all(ok, lambda r: 0 <= r["outside_allocator_gib"] <= OUTSIDE_ALLOCATOR_MAX_GIB),
        f"{min(spread):.2f}-{max(spread):.2f} GiB over {len(spread)} trials" if spread else "no ok trial",
    )


def _gate_target(gaps: list[dict[str, Any]]) -> tuple[str, bool, str]:
    return (
        "memory back at the baseline before every launch",
        _all(gaps, lambda g: bool(g.get("back_at_launch"))),
        f"{sum(bool(g.get('back_at_launch')) for g in gaps)}/{len(gaps)} launches",
    )


def _nccl_target(f: Mapping[str, Any], runs: list[dict[str, Any]]) -> tuple[str, bool, str]:
    differ = sorted({n for r in runs for n in r["nccl"]["differ"]})
    dropped = {**((f.get("study") or {}).get("dropped") or {}), **((f.get("oom") or {}).get("dropped") or {})}
    reported = sorted({n for r in runs for n in r["nccl"]["reported"]})
    wrongly = sorted(n for n in dropped if n in reported)
    return (
        "NCCL reports the trials' values, as set; nothing it reported dropped",
        bool(reported) and not differ and not wrongly,
        f"reported {reported or 'nothing'}; differ {differ or 'none'}; dropped {sorted(dropped) or 'none'}",
    )


def _doctor_target(f: Mapping[str, Any]) -> tuple[str, bool, str]:
    checks = {c["name"]: c for c in (f.get("doctor") or {}).get("checks", [])}
    visible = checks.get("gpu.visible") or {}
    model = ((f.get("hardware") or {}).get("fingerprint") or {}).get("gpu_model")
    return (
        "doctor sees the GPU",
        visible.get("status") == "pass" and bool(model) and model in visible.get("detail", ""),
        "; ".join(f"{n} {c['status']}" for n, c in checks.items()) or "doctor did not run",
    )


def _hardware_target(f: Mapping[str, Any]) -> tuple[str, bool, str]:
    hw = f.get("hardware") or {}
    fp, facts = hw.get("fingerprint") or {}, hw.get("torch") or {}
    named = all(fp.get(k) for k in ("gpu_model", "driver_version", "cuda_version", "nccl_version"))
    same_nccl = fp.get("nccl_version") == facts.get("nccl")
    return (
        "the hardware record names GPU, driver, CUDA and NCCL (torch's own NCCL)",
        named and same_nccl,
        f"{hw.get('summary')}; torch's NCCL {facts.get('nccl')}",
    )


def _hang_targets(h: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    frames = (h.get("stack") or {}).get("frames") or []
    in_stall = any(fr.startswith("stall (") and "gpu_train.py" in fr for fr in frames)
    detect, teardown, back = h.get("detect_s"), h.get("teardown_s"), h.get("gpu_back_s")
    limit = HANG_GRACE_S + MARGIN_S
    return [
        (
            "a stalled rank is a hang with its py-spy stack",
            h.get("status") == "hang" and in_stall,
            f"{h.get('status')}; rank 0 in {frames[0] if frames else 'no stack'}",
        ),
        (
            f"hang found within the stall timeout + {MARGIN_S:g} s",
            detect is not None and detect <= HANG_STALL_S + MARGIN_S,
            f"{detect} s (stall {HANG_STALL_S:g} s)",
        ),
        (
            f"torn down within grace + {MARGIN_S:g} s, nothing left on the GPU",
            teardown is not None
            and teardown <= limit
            and back is not None
            and back <= limit
            and h.get("survivors") == 0
            and not h.get("gpu_processes_after"),
            f"processes gone {teardown} s, memory back {back} s, survivors {h.get('survivors')}, "
            f"GPU processes {len(h.get('gpu_processes_after') or [])}",
        ),
    ]


# -- the table -----------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def render(f: Mapping[str, Any], console: Console, compare: Mapping[str, Any] | None = None) -> None:
    hw = f.get("hardware") or {}
    console.print(f"[bold]{hw.get('summary', 'hardware unknown')}[/bold]  (recorded {f.get('recorded_at')})")
    t = Table(title="trials (study, then the pinned OOM)")
    for col in (
        "#",
        "status",
        "mbs x seq, ckpt",
        "NCCL set",
        "tokens/s",
        "NVML GiB",
        "reserved GiB",
        "outside",
        "pred / meas",
        "NCCL seen",
    ):
        t.add_column(col)
    model = {r["number"]: r for r in (f.get("memory_model") or {}).get("per_trial", [])}
    rows = list((f.get("study") or {}).get("trials") or [])
    if (f.get("oom") or {}).get("trial"):
        rows.append({**f["oom"]["trial"], "number": "oom"})
    for r in rows:
        v, m = r["values"], model.get(r["number"], {})
        nccl = ",".join(f"{k[5:]}={x}" for k, x in r["nccl"]["set"].items() if x is not None) or "-"
        seen = ",".join(r["nccl"]["reported"]) or "-"
        status = r["status"] + (f" ({r['oom']['tried']})" if r.get("oom") else "")
        t.add_row(
            str(r["number"]),
            status,
            f"{v.get('micro_batch_size')} x {v.get('seq_len')}, {'on' if v.get('activation_checkpointing') else 'off'}",
            nccl,
            _fmt(r.get("throughput")),
            _fmt(r.get("nvml_peak_gib")),
            _fmt(r.get("job_reserved_gib")),
            _fmt(r.get("outside_allocator_gib")),
            f"{_fmt(m.get('predicted_frac'))} / {_fmt(m.get('measured_frac'))}",
            seen,
        )
    console.print(t)
    mm, h = f.get("memory_model") or {}, f.get("hang") or {}
    first, pinned = mm.get("first_oom") or {}, mm.get("oom_stage_config") or {}
    console.print(
        f"memory model: median |error| {_fmt(mm.get('median_abs_error_frac'))} of the GPU, "
        f"max {_fmt(mm.get('max_abs_error_frac'))}; first OOM predicted {_fmt(first.get('predicted_frac'))}; "
        f"OOM stage's config predicted {_fmt(pinned.get('predicted_frac'))}"
    )
    frames = (h.get("stack") or {}).get("frames") or ["-"]
    console.print(
        f"hang: {h.get('status')} after {_fmt(h.get('detect_s'))} s silence, "
        f"processes gone {_fmt(h.get('teardown_s'))} s, memory back {_fmt(h.get('gpu_back_s'))} s; rank 0: {frames[0]}"
    )
    _render_targets(f, console)
    if compare is not None:
        _render_compare(f, compare, console)
    for stage, error in (f.get("errors") or {}).items():
        console.print(f"[red]{stage} failed[/red]: {error}")


def _render_targets(f: Mapping[str, Any], console: Console) -> None:
    t = Table(title="targets")
    for col in ("target", "met", "figure"):
        t.add_column(col)
    for name, met, figure in targets(f):
        t.add_row(name, "yes" if met else "[red]no[/red]", figure)
    console.print(t)


def key_figures(f: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures a later run is compared on."""
    rows = (f.get("study") or {}).get("trials") or []
    ok = [r["throughput"] for r in rows if r["status"] == "ok" and r.get("throughput")]
    outside = [r["outside_allocator_gib"] for r in rows if r.get("outside_allocator_gib") is not None]
    oom = ((f.get("oom") or {}).get("trial") or {}).get("oom") or {}
    h, mm = f.get("hang") or {}, f.get("memory_model") or {}
    return {
        "best tokens/s": max(ok) if ok else None,
        "trials ok": float(sum(r["status"] == "ok" for r in rows)),
        "trials oom": float(sum(r["status"] == "oom" for r in rows)),
        "median outside allocator GiB": statistics.median(outside) if outside else None,
        "OOM tried GiB": oom.get("tried_gib"),
        "memory model median |error|": mm.get("median_abs_error_frac"),
        "hang detect s": h.get("detect_s"),
        "hang teardown s": h.get("teardown_s"),
        "study wall s": (f.get("study") or {}).get("wall_s"),
    }


def _render_compare(f: Mapping[str, Any], old: Mapping[str, Any], console: Console) -> None:
    from nccl_tune.nightly.fingerprint import Fingerprint, changes

    def fp(x: Mapping[str, Any]) -> Fingerprint | None:
        data = (x.get("hardware") or {}).get("fingerprint")
        return Fingerprint.from_json(data) if data else None

    t = Table(title=f"against the run of {old.get('recorded_at')}")
    for col in ("figure", "then", "now"):
        t.add_column(col)
    now, then = key_figures(f), key_figures(old)
    for name in now:
        t.add_row(name, _fmt(then.get(name)), _fmt(now[name]))
    console.print(t)
    diff = changes(fp(old), fp(f))
    console.print("node: " + ("; ".join(diff) if diff else "the same hardware and software"))


# -- the run -------------------------------------------------------------------------------------
def slug(model: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (model or "unknown").lower()).strip("-")


def run_stages(args: argparse.Namespace, figures: dict[str, Any], save: Callable[[], None], console: Console) -> None:
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    timeline = NvmlTimeline()
    timeline.start()

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        console.print(f"[bold]{name}[/bold] ...")
        try:
            figures[name] = fn()
        except Exception as exc:  # one stage's failure is a figure; the others still run
            figures.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        figures.setdefault("stage_s", {})[name] = round(time.monotonic() - t0, 1)
        save()
        return figures.get(name)

    try:
        stage("doctor", stage_doctor)
        study = stage("study", lambda: stage_study(work, args.trials))
        if study:
            figures["gate"] = gate_gaps(study["trials"], timeline)
        oom = stage("oom", lambda: stage_oom(work))
        oom_values = (oom or {}).get("trial", {}).get("values")
        stage("memory_model", lambda: stage_memory_model(work, oom_values))
        stage("hang", lambda: stage_hang(work, timeline))
    finally:
        timeline.stop()
        save()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the figures here (default: benchmarks/results/gpu-<gpu>.json)")
    p.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "gpu"), help="studies, trial folders and logs")
    p.add_argument("--trials", type=int, default=9, help="trials of the study (one confirmation comes on top)")
    p.add_argument("--compare", help="an earlier run's JSON to compare with (default: the kept one for this GPU)")
    p.add_argument("--show", help="print the table of a written JSON and exit (nothing is run)")
    args = p.parse_args()
    console = Console(stderr=False, width=200)
    if args.show:
        return show(args, console)
    try:
        hardware = stage_hardware()
    except NoCuda as exc:
        print(f"benchmarks/gpu.py: {exc}: this benchmark runs on a GPU node (docs/gpu.md)", file=sys.stderr)
        return 2
    out = Path(args.json) if args.json else RESULTS / f"gpu-{slug(hardware['fingerprint']['gpu_model'])}.json"
    figures: dict[str, Any] = {
        "benchmark": "gpu",
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "hardware": hardware,
        "settings": {"trials": args.trials, "hang_stall_s": HANG_STALL_S, "hang_grace_s": HANG_GRACE_S},
    }

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(figures, indent=2, default=str) + "\n")
        tmp.replace(out)

    run_stages(args, figures, save, console)
    figures["targets"] = [{"target": n, "met": m, "figure": x} for n, m, x in targets(figures)]
    save()
    render(figures, console, _compare_with(args, out, hardware))
    console.print(f"figures: {out}")
    return 0 if all(t["met"] for t in figures["targets"]) and not figures.get("errors") else 1


def _commit() -> str | None:
    from nccl_tune.nightly.fingerprint import git_head

    return git_head(REPO)[0]


def _compare_with(args: argparse.Namespace, out: Path, hardware: Mapping[str, Any]) -> dict[str, Any] | None:
    path = Path(args.compare) if args.compare else RESULTS / f"gpu-{slug(hardware['fingerprint']['gpu_model'])}.json"
    if not path.is_file() or path.resolve() == out.resolve():
        return None
    return json.loads(path.read_text())


def show(args: argparse.Namespace, console: Console) -> int:
    try:
        figures = json.loads(Path(args.show).read_text())
        compare = json.loads(Path(args.compare).read_text()) if args.compare else None
    except (OSError, ValueError) as exc:
        print(
            f"benchmarks/gpu.py: cannot read {exc.filename if isinstance(exc, OSError) else args.show}: {exc}",
            file=sys.stderr,
        )
        return 1
    render(figures, console, compare)
    return 0 if all(met for _, met, _ in targets(figures)) and not figures.get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
