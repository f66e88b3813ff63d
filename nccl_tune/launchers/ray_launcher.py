"""``RayLauncher``: each trial on one whole node of an existing Ray cluster, supervised from here.

The study (Optuna, its storage, the trial folders) stays with the driver. A trial takes a free
node (one trial per node), starts a ``TrialHost`` actor pinned to it, waits for that node's GPU
gate, and starts the command there through the local launcher's own spawn. The driver runs the
one supervision (``process_tree.ProcessTreeLauncher``) over the same kind of tree as the local
launcher (``piped.PipedTree``): the command's output is fetched from the actor as it comes
(``RemoteProcess``) and fed through a local pipe to the log pump and progress parser, so
``output.log`` grows in the trial folder and the stall, start-up and budget clocks run here; the
node's memory sampler is read with each fetch (``RemoteSampler``). Teardown runs on the node
(``teardown.terminate``), then the actor is killed. A node lost mid-trial ends the trial with a
line naming the node in its log, and the node leaves the pool. The NCCL check (``nccl_check``)
runs the same way, on a free node, as a run of its own before its trial.

Nodes: those offering the custom resource ``nccl_tune_node`` (``ray start --resources
'{"nccl_tune_node": 1}'``); without any, every node with GPUs, each trial holding all of them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.base import CheckSupport
from nccl_tune.launchers.local import REAP_GRACE_S, LocalLauncher
from nccl_tune.launchers.piped import POLL_S, TAIL_LINES, PhasesOpen, PipedTree, TrialFolder, launch_error, open_folder
from nccl_tune.launchers.process import resolve_command, tuner_alive
from nccl_tune.launchers.process_tree import LaunchFailed, ProcessTreeLauncher
from nccl_tune.launchers.progress import compile_rules
from nccl_tune.launchers.ray_node import Chunk, MemoryReading, TrialHost, node_baseline_gib, reap_node, trial_env
from nccl_tune.launchers.teardown import TeardownReport
from nccl_tune.launchers.trial_files import write_result
from nccl_tune.trial import TrialResult, TrialSpec

NODE_RESOURCE = "nccl_tune_node"
"""The custom resource marking a node trials may use (one unit per node)."""
READ_WAIT_S = 0.2
"""How long one fetch of output waits on the node for new bytes."""
CALL_TIMEOUT_S = 60.0
"""A node that does not answer a call for this long is taken as lost."""
PIPE_FULL_WAIT_S = 0.02
"""How long the feed waits, outside the pipe's lock, before writing again to a full pipe."""
DRAIN_S = 10.0
"""After teardown, how long the output still in flight may take to arrive."""


def _ray() -> Any:
    import ray

    return ray


@dataclass(frozen=True)
class Node:
    """A node of the cluster trials may run on."""

    node_id: str
    address: str
    gpus: float

    def describe(self) -> str:
        return f"node {self.address} (id {self.node_id[:12]})"


class RemoteSampler:
    """The node's memory sampler as the driver reads it (a ``memory.MemorySource``): the latest
    reading fetched."""

    def __init__(self) -> None:
        self.reading = MemoryReading()

    def start(self) -> None:
        """Sampling runs on the node."""

    def stop(self) -> None:
        """Sampling runs on the node."""

    @property
    def gpu_peak_gib(self) -> dict[int, float]:
        return dict(self.reading.gpu_peak_gib)

    @property
    def gpu_total_gib(self) -> dict[int, float]:
        return dict(self.reading.gpu_total_gib)

    @property
    def phase_peak_frac(self) -> dict[str, float]:
        """Per phase, as the node read the phases from the output (``ray_node.TrialHost.start``)."""
        return dict(self.reading.phase_peak_frac)

    @property
    def phases_at_last_sample(self) -> tuple[str, ...]:
        return tuple(self.reading.phases_at_last_sample)

    @property
    def peak_rss_gib(self) -> float:
        return self.reading.peak_rss_gib

    @property
    def host_peak_frac(self) -> float:
        return self.reading.host_peak_frac


class RemoteProcess:
    """The command on the node as the driver reads it (a ``piped.Command``): ``pid``, ``poll()``,
    ``returncode`` and a ``stdout`` pipe fed with the output fetched from the node."""

    def __init__(self, actor: Any, pid: int, node: Node) -> None:
        self.actor = actor
        self.pid = pid
        self.node = node
        self.returncode: int | None = None
        self.lost: str | None = None
        self.sampler = RemoteSampler()
        self._pipe_lock = threading.Lock()
        read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self.stdout = os.fdopen(read_fd, "rb", buffering=0)
        self._write(f"nccl-tune: trial running on Ray {node.describe()}, pid {pid}\n".encode())
        self._thread = threading.Thread(target=self._feed, name=f"ray-feed:{pid}", daemon=True)
        self._thread.start()

    def poll(self) -> int | None:
        return self.returncode

    def _write(self, data: bytes) -> None:
        """Feed the pipe; nothing once ``drain`` closed it (its descriptor may be reused by then).
        The descriptor does not block, and the lock is held for one write at a time: while the pipe
        is full (nobody reads it yet), the feed waits outside the lock, so ``drain`` can still close
        it after its timeout and the rest is dropped."""
        view = memoryview(data)
        while view:
            with self._pipe_lock:
                if self._write_fd < 0:
                    return
                try:
                    view = view[os.write(self._write_fd, view) :]
                    continue
                except BlockingIOError:
                    pass
            time.sleep(PIPE_FULL_WAIT_S)

    def _feed(self) -> None:
        ray = _ray()
        try:
            while True:
                chunk: Chunk = ray.get(self.actor.read.remote(READ_WAIT_S), timeout=CALL_TIMEOUT_S)
                self._write(chunk.data)
                self.sampler.reading = chunk.memory
                if chunk.returncode is not None and len(chunk.data) < 1 << 20:
                    self.returncode = chunk.returncode
                if chunk.eof and self.returncode is not None:
                    break
        except Exception as exc:  # the actor, its worker or its node is gone
            self.lose(exc)

    def lose(self, exc: BaseException) -> None:
        """Record that the node (or its actor) went away, as a line of the trial's log."""
        if self.lost is None:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.lost = f"{self.node.describe()} was lost during the trial: {type(exc).__name__}: {first}"[:400]
            try:
                self._write(f"\nnccl-tune: {self.lost}\n".encode())
            except OSError:
                pass
        if self.returncode is None:
            self.returncode = -signal.SIGKILL

    def drain(self, timeout_s: float) -> None:
        """Wait for the output still in flight, then end the pipe. The pipe stays open until here, not
        until the node's output ends: a node found lost at teardown, after its command's end was
        already read, still gets its line into the trial's log."""
        self._thread.join(timeout_s)
        with self._pipe_lock:
            if self._write_fd >= 0:
                os.close(self._write_fd)
                self._write_fd = -1


class NodePool:
    """Free nodes; a trial takes one and gives it back when its node is still alive."""

    def __init__(self, nodes: list[Node]) -> None:
        self._cond = threading.Condition()
        self._free = list(nodes)
        self._known = {n.node_id for n in nodes}

    def size(self) -> int:
        return len(self._known)

    def take(self, wait_s: float) -> Node | None:
        with self._cond:
            deadline = time.monotonic() + wait_s
            while not self._free:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._free.pop(0)

    def give(self, node: Node, alive: bool) -> None:
        with self._cond:
            if alive:
                self._free.append(node)
            else:
                self._known.discard(node.node_id)
            self._cond.notify_all()

    def add(self, nodes: list[Node]) -> None:
        with self._cond:
            for n in nodes:
                if n.node_id not in self._known:
                    self._known.add(n.node_id)
                    self._free.append(n)
            self._cond.notify_all()


def cluster_nodes(resource: str = NODE_RESOURCE) -> list[Node]:
    """Alive nodes offering ``resource``; without any, alive nodes with GPUs."""
    alive = [n for n in _ray().nodes() if n.get("Alive")]
    marked = [n for n in alive if n.get("Resources", {}).get(resource, 0) >= 1]
    chosen = marked or [n for n in alive if n.get("Resources", {}).get("GPU", 0) >= 1]
    return [
        Node(n["NodeID"], n.get("NodeManagerAddress", "?"), 0.0 if marked else n["Resources"]["GPU"]) for n in chosen
    ]


def connect_problem(address: str, error: str, environ: Mapping[str, str], home: Path) -> str:
    """The one line for a cluster ``ray.init`` could not reach. A cluster started by ``ray start``
    where a Ray token exists (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``)
    requires it, and a driver given the cluster's address sends it only under ``RAY_AUTH_MODE=token``
    (Ray 2.5x: the refusal is only in Ray's own log lines, ``Unauthenticated ... InvalidAuthToken``)."""
    first = (error.strip().splitlines() or ["no reason given"])[0]
    line = (
        f"cannot connect to the Ray cluster at {address} ({first}): start it (`ray start --head`) "
        "or give --ray-address HOST:PORT"
    )
    token_file = home / ".ray" / "auth_token"
    token = next(
        (name for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH") if environ.get(name)),
        str(token_file) if token_file.is_file() else None,
    )
    if token and "RAY_AUTH_MODE" not in environ:
        line += (
            f"; a Ray token is set here ({token}): if the cluster uses token authentication, set RAY_AUTH_MODE=token"
        )
    return line


def cluster_check_support(found: list[tuple[Node, CheckSupport]]) -> CheckSupport:
    """The NCCL check's support on a cluster, from what each node said of itself: off when a node
    cannot run it or the nodes run different Pythons (its command names one), else one rank per
    GPU of the node with fewest."""
    for node, support in found:
        if support.gpus is None:
            return CheckSupport(None, f"on Ray {node.describe()}: {support.why_not}")
    pythons = sorted({s.python for _, s in found})
    if len(pythons) != 1:
        return CheckSupport(
            None,
            f"the Ray nodes run different Pythons ({', '.join(pythons)}); the check names one"
            if pythons
            else "no Ray node answered",
        )
    return CheckSupport(min(s.gpus or 0 for _, s in found), python=pythons[0])


RayTree = PipedTree[RemoteProcess]
"""A trial on a node: its output fed to a pipe here by ``RemoteProcess``, its memory the node's."""


class RayLauncher(ProcessTreeLauncher[RayTree]):
    """Runs each trial on a whole node of a Ray cluster; several trials at once on several nodes.
    One instance serves a whole study and may be called from several threads."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        resource: str = NODE_RESOURCE,
        node_wait_s: float = 30.0,
        gate_timeout_s: float = 60.0,
        gate_tolerance_gib: float = 1.0,
        poll_s: float = POLL_S,
        memory_interval_s: float = 0.5,
        tail_lines: int = TAIL_LINES,
        stack_timeout_s: float = 5.0,
    ) -> None:
        self.address = address
        self.resource = resource
        self.node_wait_s = node_wait_s
        self._gate_timeout_s = gate_timeout_s
        self._gate_tolerance_gib = gate_tolerance_gib
        self.poll_s = poll_s
        self.memory_interval_s = memory_interval_s
        self.tail_lines = tail_lines
        self.stack_timeout_s = stack_timeout_s
        self._pool: NodePool | None = None
        self._baselines: dict[str, dict[int, float]] = {}
        self._started_ray = False

    def nccl_check_support(self) -> CheckSupport:
        """What every trial node says of itself (``LocalLauncher.nccl_check_support``, run there): a
        check then runs on a free node like a trial, under that node's Python, with one rank per GPU
        of the node with fewest; it is off when any node cannot run it. A check's node need not be
        the one its trial takes next: on nodes alike, the same NCCL values behave alike."""
        self._connect()
        return cluster_check_support(self._each_node(_check_support_here))

    # -- the cluster ------------------------------------------------------------------------------

    def _connect(self) -> NodePool:
        if self._pool is not None:
            return self._pool
        ray = _ray()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
            try:
                ray.init(address=address, log_to_driver=False, namespace="nccl-tune", configure_logging=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise NcclTuneError(connect_problem(address, str(exc), os.environ, Path.home())) from None
            self._started_ray = True
        nodes = cluster_nodes(self.resource)
        if not nodes:
            raise NcclTuneError(
                f"no node of the Ray cluster offers the resource {self.resource!r} or a GPU: start the nodes with "
                f"`ray start --resources='{{\"{self.resource}\": 1}}'`"
            )
        self._pool = NodePool(nodes)
        return self._pool

    @property
    def nodes(self) -> int:
        """Nodes trials may run on (the most trials at once)."""
        return self._connect().size()

    def _on_node(self, node: Node, **options: Any) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        return {"scheduling_strategy": strategy, "num_cpus": 0, **options}

    def _each_node(self, func: Any, *args: Any) -> list[Any]:
        ray = _ray()
        task = ray.remote(func)
        nodes = cluster_nodes(self.resource)
        refs = [task.options(**self._on_node(n)).remote(*args) for n in nodes]
        return list(zip(nodes, ray.get(refs, timeout=CALL_TIMEOUT_S * 2)))

    def prepare(self, spec: TrialSpec) -> None:
        """Connect, find the nodes, and check on one of them that the command can start there."""
        compile_rules(spec.progress)
        self._connect()
        ray = _ray()
        node = cluster_nodes(self.resource)[0]
        check = ray.remote(_command_problem).options(**self._on_node(node))
        problem = ray.get(check.remote(spec.argv, dict(spec.env), spec.marker, _cwd(spec)), timeout=CALL_TIMEOUT_S * 2)
        if problem:
            raise NcclTuneError(f"{problem} (on Ray {node.describe()})")

    def before_study(self) -> None:
        """The GPU memory baseline of every node."""
        self._connect()
        self._baselines = {n.node_id: b for n, b in self._each_node(node_baseline_gib)}

    def gate(self) -> None:
        """Each node's gate runs before each trial on it (in ``launch``)."""

    def reap(self, study: str) -> list[str]:
        """Kill the processes of ``study`` on every node (one task per node)."""
        self._connect()
        found: list[str] = []
        for _node, lines in self._each_node(reap_node, study, REAP_GRACE_S):
            found.extend(lines)
        return found

    def tuner_alive(self, pid: int) -> bool:
        """True when ``pid`` is a live nccl-tune process of this host (the driver's) other than this one."""
        return tuner_alive(pid)

    def close(self) -> None:
        if self._started_ray:
            _ray().shutdown()
            self._started_ray = False
        self._pool = None

    # -- the process tree's hooks -------------------------------------------------------------------

    @contextmanager
    def launch(self, spec: TrialSpec) -> Iterator[RayTree | LaunchFailed]:
        """Take a free node and pass its GPU gate, write the trial folder here, and start the command
        on the node (see the module docstring); the node is given back when the trial is over.
        Raises ``GpuGateError`` when a node's gate does not open, ``NcclTuneError`` when no node is left."""
        pool = self._connect()
        host = self._open_host(pool)
        try:
            folder = open_folder(
                spec, own_ray=False
            )  # the node gives the trial its private Ray (``ray_node.trial_env``)
            yield self._start_on(host, spec, folder)
        finally:
            self._close_host(pool, host)

    def _open_host(self, pool: NodePool) -> _Host:
        ray = _ray()
        from ray.exceptions import RayTaskError

        while True:
            node = pool.take(self.node_wait_s)
            if node is None:
                pool.add(cluster_nodes(self.resource))
                if pool.size() == 0:
                    raise NcclTuneError("no node of the Ray cluster is left for trials: check `ray status`")
                continue
            need = {"resources": {self.resource: 1}} if node.gpus == 0 else {"num_gpus": node.gpus}
            actor = _host_class().options(**self._on_node(node, max_concurrency=4, max_restarts=0, **need)).remote()
            try:
                ray.get(
                    actor.gate.remote(
                        self._baselines.get(node.node_id), self._gate_tolerance_gib, self._gate_timeout_s
                    ),
                    timeout=self._gate_timeout_s + CALL_TIMEOUT_S,
                )
            except RayTaskError as exc:
                ray.kill(actor, no_restart=True)
                pool.give(node, True)
                cause = exc.cause
                if isinstance(cause, NcclTuneError):
                    raise type(cause)(f"on Ray {node.describe()}: {cause}") from None
                raise NcclTuneError(f"the GPU gate failed on Ray {node.describe()}: {cause}") from None
            except Exception:  # the node went away before the trial: try another
                ray.kill(actor, no_restart=True)
                pool.give(node, False)
                continue
            return _Host(node, actor)

    def _close_host(self, pool: NodePool, host: _Host) -> None:
        ray = _ray()
        try:
            ray.kill(host.actor, no_restart=True)
        except Exception:  # already gone with its node
            pass
        lost = host.proc is not None and host.proc.lost is not None
        alive = not lost and any(n.node_id == host.node.node_id for n in cluster_nodes(self.resource))
        pool.give(host.node, alive)

    def _start_on(self, host: _Host, spec: TrialSpec, folder: TrialFolder) -> RayTree | LaunchFailed:
        """Start the command on the trial's node; ``LaunchFailed`` like the local spawn's when it cannot."""
        ray = _ray()
        from ray.exceptions import RayTaskError

        t0 = time.monotonic()
        try:
            pid = ray.get(
                host.actor.start.remote(
                    spec.argv, folder.overlay, spec.marker, _cwd(spec), self.memory_interval_s, spec.progress
                ),
                timeout=CALL_TIMEOUT_S,
            )
        except RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, (NcclTuneError, OSError, ValueError)):
                return LaunchFailed(str(cause), t0)
            return LaunchFailed(f"the command could not start on Ray {host.node.describe()}: {cause}", t0)
        except Exception as exc:
            return LaunchFailed(f"Ray {host.node.describe()} was lost before the command started: {exc}", t0)
        proc = host.proc = RemoteProcess(host.actor, pid, host.node)

        def sampler(_phases: PhasesOpen) -> RemoteSampler:
            """The node's sampler as fetched: the node reads the phases from the output itself
            (``TrialHost.start``), where its samples are taken."""
            return proc.sampler

        return PipedTree(
            spec, proc, folder, t0, sampler, baseline_gib={}, poll_s=self.poll_s, tail_lines=self.tail_lines
        )

    def take_stacks(self, spec: TrialSpec, tree: RayTree) -> StackReport:
        """The ranks' stacks, taken on the trial's node by its host actor."""
        proc = tree.command
        if proc.lost is not None:
            return StackReport(note=f"the ranks' stacks could not be taken: {proc.lost}")
        timeout = self.stack_timeout_s * 2 + CALL_TIMEOUT_S
        return _ray().get(proc.actor.stacks.remote(spec.marker, self.stack_timeout_s), timeout=timeout)

    def tear_down(self, spec: TrialSpec, tree: RayTree) -> TeardownReport:
        """Tear the trial down on its node, then collect the output still in flight."""
        ray = _ray()
        proc = tree.command
        report = TeardownReport(in_group=0, escaped=0, killed=0, survivors=0, elapsed_s=0.0)
        if proc.lost is None:
            try:
                report, returncode = ray.get(
                    proc.actor.stop.remote(spec.marker, spec.clocks.grace_s),
                    timeout=spec.clocks.grace_s + CALL_TIMEOUT_S,
                )
                if returncode is not None:
                    proc.returncode = returncode
            except Exception as exc:  # the node went away meanwhile
                proc.lose(exc)
        proc.drain(DRAIN_S)
        return report

    def launch_error_result(self, spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
        """Decided from the reason the command could not start on its node."""
        return launch_error(spec, failed)

    def record(self, spec: TrialSpec, result: TrialResult) -> None:
        """``result.json`` in the trial folder, here on the driver."""
        write_result(result, spec.trial_dir)


@dataclass
class _Host:
    """A trial's node and actor (and, once started, its command)."""

    node: Node
    actor: Any
    proc: RemoteProcess | None = None


_HOST_CLASS: Any = None


def _host_class() -> Any:
    global _HOST_CLASS
    if _HOST_CLASS is None:
        _HOST_CLASS = _ray().remote(TrialHost)
    return _HOST_CLASS


def _cwd(spec: TrialSpec) -> str | None:
    return str(spec.cwd) if spec.cwd is not None else None


def _check_support_here() -> CheckSupport:
    """On a node: whether the NCCL check can run there, as the local launcher sees it."""
    launcher = LocalLauncher()
    try:
        return launcher.nccl_check_support()
    finally:
        launcher.close()


def _command_problem(argv: tuple[str, ...], overlay: dict[str, str], marker: str, cwd: str | None) -> str | None:
    """On a node: why the command cannot start there (None when it can)."""
    try:
        resolve_command(argv, trial_env(overlay, marker, "/tmp"), Path(cwd) if cwd else None)
    except NcclTuneError as exc:
        return str(exc)
    return None
