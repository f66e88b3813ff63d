"""One trainer rank of the twin: a process in a real gloo group training a small real model.

Forked by the twin's driver (:func:`twin.driver.fork_rank`), which runs ``main(SPEC.json)``
in the child (``python -m twin.worker SPEC.json`` runs one on its own). It talks to the
driver over an inherited socket (one JSON object per line), the way a Ray actor serves method
calls: the driver asks for a phase, the rank runs it (real forward/backward, real all-gathers and
all-reduces), sleeps the rest of the phase's scaled time, and answers. A phase that raises answers
with the error and the rank stays alive, as an actor whose method raised does.

A collective that fails (gloo's timeout, a peer gone) makes the rank dump its Flight Recorder
trace to ``f"{TORCH_FR_DUMP_TEMP_FILE}{rank}"`` and tell every other rank to dump too (a flag file
in the run folder, polled by a thread), then tear itself down with SIGABRT as PyTorch's error
handling does, or answer with the error.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from nccl_tune.atomic import write_bytes_atomic
from twin import logfmt, nccl_env

DUMP_FLAG = "fr_dump_requested"
POLL_S = 0.05


class CollectiveError(Exception):
    """A gloo collective failed (timeout, peer gone); ``__cause__`` is gloo's exception."""


class Rank:
    """State and behaviour of one rank."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.rank: int = spec["rank"]
        self.world: int = spec["world"]
        self.gpus: list[int] = spec["gpus"]
        self.run_dir = Path(spec["run_dir"])
        self.color: bool = spec.get("color", True)
        self.pid = os.getpid()
        self.infra_log: str | None = spec.get("infra_log")
        # Today's SkyRL: the worker's stdout/stderr go to the infra log, where Ray adds no prefix.
        self.prefix = "" if self.infra_log else logfmt.ray_prefix(logfmt.POLICY_ACTOR, self.pid, self.color)
        self.sock = socket.socket(fileno=spec["sock_fd"])
        self.reader = self.sock.makefile("r", encoding="utf-8")
        self._dump_lock = threading.Lock()
        self._dumped = False
        self.torch: Any = None
        self.dist: Any = None

    # -- output ------------------------------------------------------------------------------
    def raw(self, text: str) -> None:
        """Lines as the process prints them, behind Ray's prefix (one write per line)."""
        for part in text.split("\n"):
            os.write(2, (self.prefix + part + "\n").encode("utf-8", "replace"))

    def log(self, message: str, *, level: str = "INFO", function: str = "init_model", line: int = 0) -> None:
        """A loguru line from the FSDP worker module."""
        self.raw(
            logfmt.loguru_line(
                message,
                level=level,
                name=self.spec.get("worker_module", "skyrl_train.workers.fsdp.fsdp_worker"),
                function=function,
                line=line,
                color=self.color,
            )
        )

    def reply(self, obj: dict[str, Any]) -> None:
        try:
            self.sock.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            os._exit(1)

    # -- start-up ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.infra_log:  # as SkyRL's redirect_actor_output_to_file: append, then dup2 onto 1 and 2
            with open(self.infra_log, "a", buffering=1) as fh:
                os.dup2(fh.fileno(), 1)
                os.dup2(fh.fileno(), 2)
        faulthandler.enable()
        parent = os.getppid()
        threading.Thread(target=self._watch_parent, args=(parent,), daemon=True).start()
        threading.Thread(target=self._watch_dump_flag, daemon=True).start()
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        spec = self.spec
        dist.init_process_group(
            "gloo",
            init_method=f"file://{spec['store']}",
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(seconds=spec["init_timeout_s"]),
        )
        dist.barrier()
        set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)
        if set_timeout is not None:
            set_timeout(timedelta(seconds=spec["timeout_s"]))
        else:  # older torch: collectives keep the (longer) rendezvous timeout
            self.log(f"cannot shorten the process-group timeout on torch {torch.__version__}", level="WARNING", line=90)
        torch.manual_seed(spec["seed"])
        self.model = _tiny_policy(torch)
        self.opt = _Adam(torch, list(self.model.parameters()), lr=spec["lr"])
        self.flat_numel = sum(p.numel() for p in self.model.parameters())
        self.shard = -(-self.flat_numel // self.world)

    def _watch_parent(self, parent: int) -> None:
        while True:
            time.sleep(0.25)
            if os.getppid() != parent:
                os._exit(1)

    def _watch_dump_flag(self) -> None:
        flag = self.run_dir / DUMP_FLAG
        while True:
            time.sleep(POLL_S)
            if flag.exists():
                self.dump_fr()
                return

    # -- Flight Recorder ---------------------------------------------------------------------
    def request_dumps(self) -> None:
        """Ask every rank to dump (as PyTorch's watchdog does through the store)."""
        try:
            (self.run_dir / DUMP_FLAG).touch()
        except OSError:
            pass

    def dump_fr(self) -> None:
        """Write this rank's Flight Recorder trace once, atomically. A second caller (the main thread
        failing while the flag watcher dumps) waits for the dump in progress: a rank that aborted
        mid-dump would lose its trace and the one line that names its rank."""
        with self._dump_lock:
            if self._dumped:
                return
            self._dumped = True
            self._write_dump()

    def _write_dump(self) -> None:
        spec = self.spec
        if not spec["fr_enabled"] or self.torch is None:
            return
        try:
            data = self.torch._C._distributed_c10d._dump_fr_trace()
        except Exception as exc:  # noqa: BLE001 - a failed dump is reported, never fatal
            self.raw(f"[rank{self.rank}]: Flight Recorder dump failed: {exc}")
            return
        path = Path(f"{spec['fr_prefix']}{self.rank}")
        try:
            write_bytes_atomic(path, data)
        except OSError as exc:
            self.raw(f"[rank{self.rank}]: Flight Recorder dump to {path} failed: {exc}")
            return
        self.raw(f"[rank{self.rank}]: Flight Recorder trace written to {path} ({len(data)} bytes)")

    # -- collectives -------------------------------------------------------------------------
    def coll(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:
            raise CollectiveError(str(exc)) from exc

    def gather_params(self) -> None:
        """FSDP's all-gather: every rank contributes its shard of the flat parameters."""
        torch = self.torch
        flat = torch.cat([p.detach().reshape(-1) for p in self.model.parameters()])
        flat = torch.nn.functional.pad(flat, (0, self.shard * self.world - flat.numel()))
        mine = flat[self.rank * self.shard : (self.rank + 1) * self.shard].clone()
        parts = [torch.empty_like(mine) for _ in range(self.world)]
        self.coll(self.dist.all_gather, parts, mine)
        full = torch.cat(parts)[: self.flat_numel]
        offset = 0
        with torch.no_grad():
            for p in self.model.parameters():
                n = p.numel()
                p.copy_(full[offset : offset + n].view_as(p))
                offset += n

    def reduce_grads(self) -> None:
        torch = self.torch
        grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in self.model.parameters()]
        flat = torch.cat(grads)
        self.coll(self.dist.all_reduce, flat)
        flat /= self.world
        offset = 0
        for p in self.model.parameters():
            n = p.numel()
            if p.grad is not None:
                p.grad.copy_(flat[offset : offset + n].view_as(p))
            offset += n

    # -- phases ------------------------------------------------------------------------------
    def _batch(self, step: int, k: int):
        torch = self.torch
        g = torch.Generator().manual_seed(1000 * step + 10 * k + self.rank)
        tokens = torch.randint(0, VOCAB, (2, 17), generator=g)
        adv = torch.randn(2, 1, generator=g)
        return tokens, adv

    def _logprobs(self, tokens):
        torch = self.torch
        logits = self.model(tokens[:, :-1])
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)

    def _event(self, event: dict[str, Any] | None, k: int, n: int, t0: float, target: float) -> None:
        if not event:
            return
        at = min(max(float(event.get("at_frac", 0.3)), 0.0), 0.999)
        if int(at * n) != k:
            return
        _sleep_until(t0 + at * target)
        kind = event["kind"]
        if kind == "oom":
            raise getattr(self.torch, "OutOfMemoryError", self.torch.cuda.OutOfMemoryError)(event["message"])
        if kind == "crash":
            os.kill(self.pid, signal.SIGSEGV)
            time.sleep(5)
        if kind == "hang":
            time.sleep(self.spec["timeout_s"] + 0.5)

    def policy_train(self, step: int, t0: float, target: float, event) -> dict[str, float]:
        torch = self.torch
        n = 2
        total = 0.0
        for k in range(n):
            self.gather_params()
            self._event(event, k, n, t0, target)
            tokens, adv = self._batch(step, k)
            loss = -(adv * self._logprobs(tokens)).mean()
            loss.backward()
            total += float(loss.detach())
            self.reduce_grads()
            _sleep_until(t0 + target * (k + 1) / n)
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec["max_grad_norm"]))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        stats = torch.tensor([total / n, gnorm])
        self.coll(self.dist.all_reduce, stats)
        stats /= self.world
        return {"policy_loss": float(stats[0]), "grad_norm": float(stats[1])}

    def fwd_logprobs(self, step: int, t0: float, target: float, event) -> dict[str, float]:
        torch = self.torch
        self.gather_params()
        self._event(event, 0, 1, t0, target)
        with torch.no_grad():
            lp = self._logprobs(self._batch(step, 9)[0]).mean().reshape(1)
        parts = [torch.empty_like(lp) for _ in range(self.world)]
        self.coll(self.dist.all_gather, parts, lp)
        _sleep_until(t0 + target)
        return {"avg_logprob": float(torch.cat(parts).mean())}

    def sync_weights(self, step: int, t0: float, target: float, event) -> dict[str, float]:
        self.gather_params()
        self._event(event, 0, 1, t0, target)
        _sleep_until(t0 + target)
        self.coll(self.dist.barrier)
        return {}

    def broadcast_weights(self, step: int, t0: float, target: float, event) -> dict[str, float]:
        for p in self.model.parameters():
            self.coll(self.dist.broadcast, p.data, 0)
        _sleep_until(t0 + target)
        self.coll(self.dist.barrier)
        return {}

    def plain(self, step: int, t0: float, target: float, event) -> dict[str, float]:
        _sleep_until(t0 + target)
        self.coll(self.dist.barrier)
        return {}

    def run_phase(self, msg: dict[str, Any]) -> None:
        t0 = time.monotonic()
        handler = {
            "policy_train": self.policy_train,
            "fwd_logprobs_values_reward": self.fwd_logprobs,
            "sync_weights": self.sync_weights,
            "init_weight_sync_state": self.broadcast_weights,
        }.get(msg["name"], self.plain)
        try:
            metrics = handler(msg["step"], t0, float(msg["target_s"]), msg.get("event"))
        except CollectiveError as exc:
            self.collective_failed(exc)
            return
        except Exception as exc:  # noqa: BLE001 - an actor method that raised: answer, stay alive
            self.method_failed(exc, msg["name"])
            return
        for gpu, gib, cap in msg.get("memory", ()):
            self.log(logfmt.memory_line(gpu, msg["step"], gib, cap), function="ppo_train", line=706)
        self.reply({"ok": True, "metrics": metrics})

    # -- failures ----------------------------------------------------------------------------
    def method_failed(self, exc: BaseException, phase: str) -> None:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip("\n")
        self.raw(text)
        self.reply(
            {
                "ok": False,
                "type": type(exc).__name__,
                "module": type(exc).__module__,
                "message": str(exc),
                "traceback": text.split("\n"),
                "method": _METHOD.get(phase, phase),
            }
        )

    def collective_failed(self, exc: CollectiveError) -> None:
        cause = exc.__cause__ or exc
        self.request_dumps()
        self.dump_fr()
        text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)).rstrip("\n")
        self.raw(text)
        if self.spec["abort"]:
            self.raw("terminate called after throwing an instance of 'c10::DistBackendError'")
            self.raw(f"  what():  {cause}")
            os.abort()
        self.reply(
            {
                "ok": False,
                "type": "DistBackendError",
                "module": "torch.distributed",
                "message": str(cause),
                "traceback": text.split("\n"),
                "method": "ppo_train",
            }
        )

    def nccl_info(self) -> None:
        """What NCCL prints at communicator init with NCCL_DEBUG=INFO, per modelled GPU: the INIT
        lines, and one ENV line for every variable it read (with the values this process got)."""
        host = socket.gethostname()
        env = dict(os.environ)
        texts = nccl_env.env_report(env)
        if nccl_env.info_enabled(env, "INIT"):
            texts = [f"NCCL version {logfmt.NCCL_VERSION}+cuda12.8", *texts, "Channel 00/16 : 0 1 2 3 4 5 6 7",
                     "Connected all rings, use ring PXN 0 GDR 1"]  # fmt: skip
        for gpu in self.gpus:
            for text in texts:
                self.raw(logfmt.nccl_info_line(gpu, self.pid, text, host=host))

    def init_model(self, msg: dict[str, Any]) -> None:
        fail = msg.get("fail")
        self.log(f"Initialized process group rank {self.rank}/{self.world} (modelled GPUs {self.gpus})", line=88)
        self.nccl_info()
        if fail:
            host = socket.gethostname()
            for gpu in self.gpus:
                self.raw(logfmt.nccl_warn_line(gpu, self.pid, fail["warn"], host=host))
            try:
                raise self.dist.DistBackendError(logfmt.nccl_error_text(fail["error"], fail["warn"]))
            except Exception as exc:  # noqa: BLE001
                self.method_failed(exc, "init_model")
            return
        try:
            for p in self.model.parameters():
                self.coll(self.dist.broadcast, p.data, 0)
        except CollectiveError as exc:
            self.collective_failed(exc)
            return
        self.log("init policy model done", line=142)
        self.reply({"ok": True, "metrics": {}})

    # -- main loop ---------------------------------------------------------------------------
    def serve(self) -> None:
        self.reply({"ok": True, "ready": True, "pid": self.pid})
        for line in self.reader:
            msg = json.loads(line)
            op = msg.get("op")
            if op == "exit":
                break
            if op == "init":
                self.init_model(msg)
            elif op == "phase":
                self.run_phase(msg)
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


_METHOD = {
    "policy_train": "ppo_train",
    "fwd_logprobs_values_reward": "forward",
    "sync_weights": "broadcast_to_inference_engines",
    "init_weight_sync_state": "init_weight_sync_state",
    "init_model": "init_model",
}
VOCAB = 256


class _Adam:
    """Adam's update, written out: ``torch.optim``'s optimizers import TorchDynamo when built (about
    as much CPU as torch itself, in every rank of every run), and the twin's rank needs only the step."""

    def __init__(
        self, torch, params: list, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.torch, self.params, self.lr, self.betas, self.eps = torch, params, lr, betas, eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def step(self) -> None:
        b1, b2 = self.betas
        self.t += 1
        with self.torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v):
                if p.grad is None:
                    continue
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
                p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def _tiny_policy(torch):
    """A small causal LM head: embedding, a gated MLP block, and the output projection."""
    nn = torch.nn

    class TinyPolicy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 48)
            self.up = nn.Linear(48, 96)
            self.down = nn.Linear(96, 48)
            self.lm_head = nn.Linear(48, VOCAB, bias=False)

        def forward(self, tokens):
            h = self.embed(tokens)
            h = h + self.down(torch.nn.functional.silu(self.up(h)))
            return self.lm_head(h)

    return TinyPolicy()


def _sleep_until(deadline: float) -> None:
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def main(argv: list[str] | None = None) -> int:
    """One rank from its spec file (``fork_rank``, or ``python -m twin.worker SPEC.json``)."""
    argv = sys.argv[1:] if argv is None else argv
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    spec_path.unlink(missing_ok=True)  # nothing left behind if the run is killed
    rank = Rank(spec)
    rank.start()
    rank.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
