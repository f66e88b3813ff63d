"""The twin's driver: what SkyRL's ``main_base`` entry point does, for either layout. It runs as
``python -m twin.skyrl.train.entrypoints.main_base key=value ...`` (today's SkyRL,
``skyrl.train``) or ``python -m twin.skyrl_train.entrypoints.main_base key=value ...``
(the legacy ``skyrl_train``); the module decides the layout, as in SkyRL.

It parses the overrides as SkyRL does (refusals print SkyRL's error and exit 1), models the run
(:func:`twin.evaluate.evaluate`), forks ``SIM_RANKS`` trainer ranks (real processes in a
real gloo group, :mod:`twin.worker`) and then plays the run: every phase in SkyRL's order,
SkyRL's log lines, each phase taking its modelled time scaled by ``SIM_TIME_SCALE``. Phases the
trainer runs are dispatched to the ranks; generation and bookkeeping run here. The printed times
are measured wall times.

Failures happen for real: the rank that overflows raises ``torch.OutOfMemoryError`` and stays
alive; the others time out in gloo, dump their Flight Recorder traces and abort; this driver waits
for every rank as ``ray.get`` does, prints Ray's error, stops the ranks and exits 1.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import setproctitle
import yaml

from twin import logfmt, worker
from twin.config import SimConfig, parse_overrides
from twin.cost_model import H100_CAPACITY_GIB
from twin.evaluate import Outcome, PhaseSpan, evaluate
from twin.layout import Layout, names
from twin.refusal import HYDRA_FULL_ERROR_HINT, SimConfigError
from twin.worker import DUMP_FLAG

READY_TIMEOUT_S = 120.0
"""Wall seconds the driver waits for every rank to import torch and join the group."""
DUMP_WAIT_S = 2.0
"""After a collective failure, how long the driver waits for every rank's Flight Recorder dump."""
ORPHAN_LIFETIME_S = 300.0
ABORT_P = 0.75
"""Chance that a rank whose collective failed tears itself down with SIGABRT (else it raises)."""


def _write(line: str) -> None:
    os.write(2, (line + "\n").encode("utf-8", "replace"))


class ForkedRank:
    """A rank forked from the driver, with the part of ``subprocess.Popen``'s face the driver uses.
    Forked rather than started afresh: torch is imported once per run, not once per rank (seconds of
    CPU each), and the rank is still its own process in the driver's process group."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, 0
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def fork_rank(spec_path: Path, env: dict[str, str], close: list[socket.socket]) -> ForkedRank:
    """Fork one rank running ``worker.main`` on ``spec_path`` with ``env`` as its environment. The
    child keeps the socket the spec names, closes the driver's ends (``close``), takes the signal
    dispositions a fresh interpreter has and the title Ray gives an actor's process (its command
    line and name are ``ray::FSDPPolicyWorkerBase``; ``/proc/PID/environ`` still shows the driver's
    environment, which names no rank), and never returns into the driver's code."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedRank(pid)
    code = 1
    try:
        setproctitle.setproctitle(f"ray::{logfmt.POLICY_ACTOR}")
        for s in close:
            s.close()
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        code = worker.main([str(spec_path)])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - a bug in the rank: show it as a fresh process would
        traceback.print_exc()
    finally:
        os._exit(code)


@dataclass
class WorkerHandle:
    """The driver's side of one rank."""

    rank: int
    proc: ForkedRank
    sock: socket.socket
    buf: bytes = b""
    pid: int = 0
    dead: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.sock.sendall((json.dumps(msg) + "\n").encode())
        except OSError:
            self.dead = True

    def feed(self) -> bool:
        """Read what arrived; False at EOF."""
        try:
            chunk = self.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            if line.strip():
                self.pending.append(json.loads(line))
        return True


class Driver:
    """Plays one modelled run with real ranks."""

    def __init__(self, cfg: SimConfig, outcome: Outcome, seed: int, argv: list[str]) -> None:
        self.cfg = cfg
        self.outcome = outcome
        self.seed = seed
        self.argv = argv
        self.scale = cfg.env.time_scale
        self.pid = os.getpid()
        self.color = True
        self.prefix = logfmt.ray_prefix(logfmt.ENTRYPOINT_ACTOR, self.pid, self.color)
        self.names = names(cfg.layout)
        self.infra_log: Path | None = None
        """Today's SkyRL: where workers and engines write (``{trainer.log_path}/infra-*.log``)."""
        self.workers: list[WorkerHandle] = []
        self.run_dir = Path(tempfile.mkdtemp(prefix="skyrl-sim-"))
        self.timings: dict[str, float] = {}
        self.metrics: dict[str, float] = {}

    # -- output ------------------------------------------------------------------------------
    def tlog(self, site: str, message: str, level: str = "INFO") -> None:
        """A trainer line behind the entrypoint's Ray prefix (multi-line messages stay together)."""
        text = logfmt.trainer_line(
            site, message, level=level, color=self.color, name=self.names.trainer_module, sites=self.names.sites
        )
        for part in text.split("\n"):
            _write(self.prefix + part)

    def raw(self, actor: str, text: str) -> None:
        for line in logfmt.prefixed(actor, self.pid, text, self.color):
            _write(line)

    def infra(self, actor: str, text: str) -> None:
        """An engine's lines: into the infra log (today's SkyRL redirects the engines' output), else
        behind Ray's prefix on the driver's output."""
        if self.infra_log is None:
            self.raw(actor, text)
            return
        with open(self.infra_log, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")

    def open_infra_log(self) -> None:
        """Today's ``initialize_ray``: the infra log's folder is created (an unwritable
        ``trainer.log_path`` fails here, before Ray starts) and named on stdout."""
        if self.cfg.layout is not Layout.TODAY or self.cfg.env.infra_to_stdout:
            return
        folder = Path(self.cfg.log_path).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        self.infra_log = folder / f"infra-{datetime.now().strftime('%y%m%d_%H%M%S')}.log"
        self.infra_log.touch()

    # -- ranks -------------------------------------------------------------------------------
    def start_workers(self) -> None:
        cfg, env = self.cfg, self.cfg.env
        ranks = env.ranks
        store = self.run_dir / "store"
        rng = random.Random(self.seed * 7919 + 17)
        import torch  # noqa: F401 - once, before the ranks fork (as SkyRL's driver imports it too)

        if env.fr_dumps and self.outcome.failure is not None:
            # A Flight Recorder dump imports torch._inductor (seconds of CPU): a real rank has most of
            # it from torch.optim, so its dump is quick. The twin's ranks of a run that will fail get
            # it before they fork; a healthy run, which dumps nothing, is spared it.
            import torch._inductor  # noqa: F401
        for r in range(ranks):
            parent, child = socket.socketpair()
            spec = {
                "rank": r,
                "world": ranks,
                "gpus": [g for g in range(cfg.n_gpus) if g % ranks == r],
                "store": str(store),
                "run_dir": str(self.run_dir),
                "init_timeout_s": READY_TIMEOUT_S,
                "timeout_s": env.gloo_timeout_s,
                "fr_enabled": env.fr_dumps,
                "fr_prefix": env.fr_dump_prefix,
                "abort": env.abort_on_error and rng.random() < ABORT_P,
                "seed": cfg.seed,
                "lr": cfg.lr,
                "max_grad_norm": cfg.max_grad_norm,
                "sock_fd": child.fileno(),
                "color": self.color,
                "infra_log": str(self.infra_log) if self.infra_log else None,
                "worker_module": self.names.worker_module,
            }
            spec_path = self.run_dir / f"worker{r}.json"
            spec_path.write_text(json.dumps(spec))
            worker_env = dict(os.environ)
            worker_env.update(env.forced)  # what SkyRL's runtime env sets for its workers
            worker_env["TORCH_FR_BUFFER_SIZE"] = str(max(env.fr_buffer_size, 0))
            proc = fork_rank(spec_path, worker_env, close=[parent] + [w.sock for w in self.workers])
            child.close()
            self.workers.append(WorkerHandle(r, proc, parent))
        replies = self.gather("start", READY_TIMEOUT_S + 30.0)
        for w, rep in zip(self.workers, replies):
            if rep is not None and rep.get("ok"):
                w.pid = int(rep.get("pid", w.proc.pid))

    def gather(self, what: str, timeout_s: float | None = None) -> list[dict[str, Any] | None]:
        """Wait until every rank answered or died (``ray.get`` on all refs); None for a dead rank."""
        sel = selectors.DefaultSelector()
        waiting = {}
        for w in self.workers:
            if w.pending or w.dead:
                continue
            sel.register(w.sock, selectors.EVENT_READ, w)
            waiting[w.rank] = w
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while waiting:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                break
            for key, _ in sel.select(timeout=0.5 if left is None else min(left, 0.5)):
                w = key.data
                if not w.feed():
                    w.dead = True
                if w.pending or w.dead:
                    sel.unregister(w.sock)
                    waiting.pop(w.rank, None)
                    if w.dead and not w.pending:
                        self.report_death(w)
        sel.close()
        out: list[dict[str, Any] | None] = []
        for w in self.workers:
            out.append(w.pending.pop(0) if w.pending else None)
        return out

    def report_death(self, w: WorkerHandle) -> None:
        try:
            w.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        code = w.proc.returncode
        detail = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        _write(
            f"{logfmt.ray_prefix('raylet', self.pid, self.color)}A worker died or was killed while executing a task by an "
            f"unexpected system error. To troubleshoot the problem, check the logs for the dead worker. Worker PID: "
            f"{w.pid or w.proc.pid} Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
            f"connection error code 2. End of file. ({detail})"
        )

    def dispatch(self, msgs: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        for w, msg in zip(self.workers, msgs):
            if not w.dead:
                w.send(msg)
        return self.gather("phase")

    def stop_workers(self, kill: bool) -> None:
        for w in self.workers:
            if not kill and not w.dead:
                w.send({"op": "exit"})
        deadline = time.monotonic() + (0.0 if kill else 10.0)
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
            w.sock.close()

    # -- failures ----------------------------------------------------------------------------
    def raise_first(self, replies: list[dict[str, Any] | None], method: str) -> int:
        """Print the first failure in rank order as Ray raises it, stop everything, return 1."""
        self.wait_for_dumps()
        first = next((i for i, rep in enumerate(replies) if rep is None or not rep.get("ok")), 0)
        rep = replies[first]
        w = self.workers[first]
        hydra = self.cfg.layout is Layout.LEGACY
        lines = [f"Error executing job with overrides: {self.argv!r}"] if hydra else []
        lines += [
            "Traceback (most recent call last):",
            f'  File "{__file__}", line 1, in main',
            "    ray.get(skyrl_entrypoint.remote(cfg))",
        ]
        if rep is None:
            lines += [
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
                f"\tclass_name: {logfmt.POLICY_ACTOR}",
                f"\tactor_id: {os.urandom(16).hex()}",
                f"\tpid: {w.pid or w.proc.pid}",
                f"\tname: policy_worker_{first}",
                "\tip: 127.0.0.1",
                "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
                "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
                "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop "
                "--force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.",
            ]
        else:
            qual = f"{rep.get('module', '')}.{rep.get('type', 'Error')}".lstrip(".")
            lines.append(
                f"ray.exceptions.RayTaskError({rep.get('type')}): ray::{logfmt.POLICY_ACTOR}.{rep.get('method', method)}() "
                f"(pid={w.pid or w.proc.pid}, ip=127.0.0.1, actor_id={os.urandom(16).hex()}, "
                f"repr=<{self.names.worker_module}.{logfmt.POLICY_ACTOR} object at 0x7f{os.urandom(5).hex()}>)"
            )
            tb = [ln for ln in rep.get("traceback", []) if ln and not ln.startswith("Traceback")]
            lines += tb[:-1] if tb else []
            lines.append(f"{qual}: {rep.get('message', '')}")
        if hydra:
            lines += ["", HYDRA_FULL_ERROR_HINT]
        for line in lines:
            _write(line)
        self.stop_workers(kill=True)
        return 1

    def wait_for_dumps(self) -> None:
        env = self.cfg.env
        if not (self.run_dir / DUMP_FLAG).exists() or not env.fr_dumps:
            return
        wanted = [Path(f"{env.fr_dump_prefix}{w.rank}") for w in self.workers if w.proc.poll() is None]
        deadline = time.monotonic() + DUMP_WAIT_S
        while time.monotonic() < deadline and not all(p.exists() for p in wanted):
            time.sleep(0.05)

    # -- the run -----------------------------------------------------------------------------
    def event_for(self, span: PhaseSpan) -> tuple[int | None, dict[str, Any] | None]:
        """(process rank, event) when the failure happens in ``span``."""
        f = self.outcome.failure
        if f is None or span.end_s is not None or f.phase != span.name or f.step != span.step:
            return None, None
        at_frac = 0.3
        duration = self._duration_for_failure(span)
        if duration > 0:
            at_frac = min(max((f.at_s - span.start_s) / duration, 0.0), 0.95)
        rank = (f.rank or 0) % self.cfg.env.ranks
        kind = {"oom": "oom", "oom_fault": "oom", "crash_fault": "crash"}.get(f.kind, "hang")
        event: dict[str, Any] = {"kind": kind, "at_frac": at_frac}
        if kind == "oom":
            event["message"] = f.detail["message"]
        return rank, event

    def _duration_for_failure(self, span: PhaseSpan) -> float:
        return span.planned_s

    def phase_message(self, span: PhaseSpan, target: float, memory: list[tuple[int, float]]) -> list[dict[str, Any]]:
        rank, event = self.event_for(span)
        msgs = []
        for w in self.workers:
            mem = [[g, gib, H100_CAPACITY_GIB] for g, gib in memory if g % self.cfg.env.ranks == w.rank]
            msgs.append(
                {
                    "op": "phase",
                    "name": span.name,
                    "step": span.step,
                    "target_s": target,
                    "event": event if rank == w.rank else None,
                    "memory": mem,
                }
            )
        return msgs

    def run(self) -> int:
        cfg, out = self.cfg, self.outcome
        t_launch = time.monotonic()
        for warning in cfg.warnings:
            _write(f"{self.names.entrypoint_module.replace('.', '/')}.py:382: {warning}")
        self.open_infra_log()
        self.banner()
        f = out.failure
        if f is not None and f.kind == "placement":
            time.sleep(max(0.0, f.at_s * self.scale))
            _write(f"{logfmt.ray_prefix(logfmt.ENTRYPOINT_ACTOR, self.pid, self.color)}" + f.detail["text"])
            _write("TimeoutError: " + f.detail["text"])
            return 1
        if cfg.env.faults.orphan:
            self.spawn_orphan()
        self.start_workers()
        if any(w.dead for w in self.workers) or any(w.pid == 0 for w in self.workers):
            _write("RuntimeError: trainer ranks failed to start (see the lines above)")
            self.stop_workers(kill=True)
            return 1
        self.engine_startup()
        if f is not None and f.kind == "vllm_memory":
            self.infra(self.names.engine_actor, "Traceback (most recent call last):\n" + f.detail["text"])
            _write(f.detail["text"])
            _write("")
            _write(HYDRA_FULL_ERROR_HINT)
            self.stop_workers(kill=True)
            return 1
        fail = (
            {"warn": f.detail["warn"], "error": f.detail["error"]} if f is not None and f.kind == "nccl_error" else None
        )
        replies = self.dispatch([{"op": "init", "fail": fail} for _ in self.workers])
        if any(r is None or not r.get("ok") for r in replies):
            return self.raise_first(replies, "init_model")
        _sleep_until(t_launch + out.startup_s * self.scale)
        self.tlog("status", f"Number of training steps: {out.total_steps}")
        return self.play()

    def play(self) -> int:
        out = self.outcome
        stack: list[tuple[PhaseSpan, float]] = []
        pending_console: int | None = None
        for span in out.phases:
            while stack and stack[-1][0].depth >= span.depth:
                pending_console = self.close(stack.pop(), pending_console)
            if pending_console is not None and not (span.name == "eval" and span.step == pending_console):
                self.console(pending_console)
                pending_console = None
            site = span.name
            if span.step == 0 and span.name in ("sync_weights", "eval"):
                site = f"{span.name}@0"
            elif span.step == -1:
                site = f"{span.name}@end"
            self.tlog(site, logfmt.started(span.name))
            start = time.monotonic()
            if span.name in ("step", "train_critic_and_policy"):
                stack.append((span, start))
                continue
            ok = self.run_leaf(span)
            if not ok:
                return 1
            elapsed = time.monotonic() - start
            if _TIMED.get(span.name, True) and (span.step > 0 or span.name == "eval"):
                self.timings[span.name] = elapsed  # what SkyRL adds to all_timings
            if span.name == "convert_to_training_input":
                self.sequences_line()
            self.tlog(site, logfmt.finished(span.name, elapsed))
            self.after_saved(span)
        while stack:
            pending_console = self.close(stack.pop(), pending_console)
        if pending_console is not None:
            self.console(pending_console)
        if self.outcome.failure is not None:
            return 1
        if out.steps_planned == out.total_steps:
            self.tlog("training_done", "Training done!")
        self.stop_workers(kill=False)
        return 0

    def close(self, item: tuple[PhaseSpan, float], pending: int | None) -> int | None:
        span, start = item
        elapsed = time.monotonic() - start
        self.timings[span.name] = elapsed
        self.tlog(span.name, logfmt.finished(span.name, elapsed))
        if span.name == "step":
            status = {
                "policy_loss": self.metrics.get("policy_loss", 0.0),
                "policy_update_steps": max(1, self.cfg.train_batch_size // self.cfg.policy_mini_batch_size),
                "grad_norm": self.metrics.get("grad_norm", 0.0),
                "policy_lr": self.cfg.lr,
            }
            self.tlog("status", str(status))
            return span.step
        return pending

    def console(self, step: int) -> None:
        if "console" not in self.cfg.loggers:
            self.timings = {}
            self.after_step(step)
            return
        payload: dict[str, Any] = {
            "policy/policy_loss": self.metrics.get("policy_loss", 0.0),
            "policy/grad_norm": self.metrics.get("grad_norm", 0.0),
            "generate/avg_logprob": self.metrics.get("avg_logprob", 0.0),
            "trainer/epoch": (step - 1) // max(1, self.outcome.steps_per_epoch),
            "trainer/global_step": step,
        }
        tokens = self.outcome.step_tokens.get(step)
        if tokens is not None:
            payload.update(tokens.metrics())
        payload.update({f"timing/{k}": v for k, v in self.timings.items()})
        text = logfmt.console_metrics(step, payload)
        line = logfmt.loguru_line(text, name=self.names.tracking_module, function="log", line=115, color=self.color)
        for part in line.split("\n"):
            _write(self.prefix + part)
        self.timings = {}
        self.after_step(step)

    def after_step(self, step: int) -> None:
        """Today's step cap: the loop ends after the step numbered ``trainer.max_training_steps``."""
        if self.cfg.max_training_steps is not None and step == self.cfg.max_training_steps:
            self.tlog("max_steps", f"Reached max_training_steps={self.cfg.max_training_steps}, stopping early.")

    def sequences_line(self) -> None:
        n = self.cfg.samples_per_step
        if self.cfg.layout is Layout.LEGACY:
            self.tlog("number_of_sequences", f"Number of sequences: {n}")
            return
        self.tlog("number_of_sequences", f"Number of sequences before padding: {n}")
        self.tlog("number_of_sequences", f"Number of sequences after padding: {n}")

    def after_saved(self, span: PhaseSpan) -> None:
        """Today's SkyRL says so when it saves after the loop (its safety net)."""
        if span.step == -1 and self.cfg.layout is Layout.TODAY:
            if span.name == "save_checkpoints":
                self.tlog("final_checkpoint", "Saved final checkpoint.")
            elif span.name == "save_hf_model":
                self.tlog("final_model", "Saved final model.")

    def run_leaf(self, span: PhaseSpan) -> bool:
        failing = span.end_s is None
        if failing:
            duration = self._duration_for_failure(span)
        else:
            duration = span.end_s - span.start_s
        target = duration * self.scale
        if not span.worker:
            time.sleep(target)
            return True
        memory: list[tuple[int, float]] = []
        mem = self.outcome_memory(span)
        if mem is not None:
            memory = list(enumerate(mem))
        replies = self.dispatch(self.phase_message(span, target, memory))
        if any(r is None or not r.get("ok") for r in replies):
            self.raise_first(replies, span.name)
            return False
        for rep in replies:
            if rep:
                self.metrics.update({k: float(v) for k, v in (rep.get("metrics") or {}).items()})
        if failing:
            _write(f"RuntimeError: the twin modelled a failure in '{span.name}' that the ranks did not produce")
            self.stop_workers(kill=True)
            return False
        return True

    def outcome_memory(self, span: PhaseSpan) -> tuple[float, ...] | None:
        if span.name != "policy_train":
            return None
        for rec in self.outcome.steps:
            if rec.step == span.step:
                return rec.gpu_peak_gib
        return None

    def banner(self) -> None:
        cfg = self.cfg
        for name in _FORWARDED:
            if os.environ.get(name):
                self.driver_log(
                    f"Exporting `{name}` to ray runtime env: {os.environ[name]}", "prepare_runtime_environment", 812
                )
        _write(
            f"{datetime.now().strftime('%Y-%m-%d %H:%M:%S,%f')[:-3]}\tINFO worker.py:1917 -- Started a local Ray instance. View the dashboard at "
            "\x1b[1m\x1b[32m127.0.0.1:8265 \x1b[39m\x1b[22m"
        )
        if self.infra_log is not None:
            self.driver_log(f"Infrastructure logs will be written to: {self.infra_log}", "initialize_ray", 924)
        dump = yaml.safe_dump(_plain(cfg.applied.tree), sort_keys=False, default_flow_style=False).rstrip("\n")
        line = logfmt.loguru_line(
            dump, name=self.names.entrypoint_module, function="_setup_trainer", line=376, color=self.color
        )
        for part in line.split("\n"):
            _write(self.prefix + part)

    def driver_log(self, message: str, function: str, line: int) -> None:
        """A loguru line of SkyRL's utilities, printed by the driver process itself (no Ray prefix)."""
        _write(
            logfmt.loguru_line(message, name=self.names.utils_module, function=function, line=line, color=self.color)
        )

    def engine_startup(self) -> None:
        cfg = self.cfg
        for e in range(cfg.num_engines):
            self.infra(
                self.names.engine_actor,
                f"INFO vllm: Initializing engine {e} with model={cfg.model_path}, tensor_parallel_size={cfg.engine_tp}, "
                f"gpu_memory_utilization={cfg.gpu_memory_utilization}, enforce_eager={cfg.enforce_eager}, "
                f"max_model_len={cfg.max_input_length + cfg.max_generate_length}",
            )

    def spawn_orphan(self) -> None:
        """A detached child in its own session that ignores SIGTERM, as a Ray worker does."""
        code = f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep({ORPHAN_LIFETIME_S})"
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.raw("raylet", f"Started a worker process (pid={child.pid}) in its own session")

    def cleanup(self) -> None:
        for p in self.run_dir.glob("*"):
            try:
                p.unlink()
            except OSError:
                pass
        try:
            self.run_dir.rmdir()
        except OSError:
            pass


_FORWARDED = ("SKYRL_RAY_PG_TIMEOUT_IN_S", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S", "NCCL_DEBUG")
"""Variables SkyRL's ``prepare_runtime_environment`` forwards to its workers and logs (among others)."""

_TIMED = {"dump_data_batch": False}
"""Phases SkyRL times without adding them to the step's ``timing/*`` metrics."""


def _plain(node: Any) -> Any:
    if isinstance(node, dict) or hasattr(node, "items"):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    return node


def _sleep_until(deadline: float) -> None:
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def main(argv: list[str] | None = None, layout: Layout = Layout.TODAY) -> int:
    """Run the twin as ``layout``'s entry point; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_overrides(argv, dict(os.environ), layout)
    except SimConfigError as exc:
        for line in exc.lines:
            _write(line)
        return 1
    seed = cfg.env.sim_seed if cfg.env.sim_seed is not None else int.from_bytes(os.urandom(4), "little")
    outcome = evaluate(cfg, seed=seed, steps=10**9)
    driver = Driver(cfg, outcome, seed, argv)

    def on_term(signum: int, _frame: Any) -> None:
        # Leave no temporary files behind, then die of the signal as the default action would.
        driver.cleanup()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return driver.run()
    except OSError as exc:  # SkyRL's initialize_ray cannot create trainer.log_path: a traceback, exit 1
        _write("Traceback (most recent call last):")
        _write(f'  File "{names(cfg.layout).utils_module.replace(".", "/")}.py", line 912, in initialize_ray')
        _write(f"{type(exc).__name__}: {exc}")
        driver.stop_workers(kill=True)
        return 1
    except KeyboardInterrupt:
        driver.stop_workers(kill=True)
        return 130
    except Exception:  # noqa: BLE001 - a bug in the twin: show it, stop the ranks
        _write(traceback.format_exc())
        driver.stop_workers(kill=True)
        return 1
    finally:
        driver.cleanup()


def entry(layout: Layout) -> None:
    """What an entry module runs: the twin as ``layout``'s ``main_base``."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    setproctitle.getproctitle()  # finds argv through the environment: now, before anything changes it
    sys.exit(main(layout=layout))
