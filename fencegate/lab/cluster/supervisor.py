"""Running servers, one owner: start, wait until ready, signal, stop, and record every PID.

`Supervisor` knows processes, not kinds of server: it is handed a `Node`
(argv, port, data dir) by `LocalCluster`, spawns it in a session of its own
(so a signal reaches its whole process group: PostgreSQL's backends die with
their postmaster), and rewrites the state file after every change. It stops
exactly the PIDs it recorded, checking that each still runs the binary it
started, so a recycled PID is never signalled. Single nodes can be stopped,
paused (SIGSTOP), resumed, killed with SIGKILL and restarted on the same
port: the lab's faults are built from these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from fencegate.cli import termination_held
from fencegate.lab.cluster.errors import ClusterError, ServerStartError
from fencegate.lab.cluster.probes import ready
from fencegate.lab.cluster.procfs import alive, descendants, runs, tail
from fencegate.lab.cluster.servers import HOST, Node, free_port
from fencegate.lab.cluster.statefile import write_state
from fencegate.lab.cluster.topology import HAPROXY_CFG

START_DEADLINE = 60.0  # a cold JVM on a loaded 2-core machine takes tens of seconds
STOP_DEADLINE = 15.0
# weed's volume server has flushed and stopped within 0.1 s of SIGTERM, but its master, filer and S3
# gateway then wait 15 s on their gRPC streams: past this grace the rest is SIGKILLed
STOP_GRACE = {"s3": 2.0}
POLL = 0.02
START_ATTEMPTS = 3  # a free port can be taken between probe and bind


class Supervisor:
    """The server processes of one cluster, recorded in its state dir; one way out (`stop_all`)."""

    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.dir = Path(state_dir or tempfile.mkdtemp(prefix="fencegate-cluster-")).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[str, Node] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._extra_dirs: list[str] = []
        # Faults call in from threads (`asyncio.to_thread`), on several nodes at once: a node's start,
        # signals, stop and reaping run under its own lock, so a restart never interleaves with the
        # kill still being recorded; the node table and the state file are changed under one more.
        self._locks: dict[str, threading.RLock] = {}
        self._state = threading.Lock()

    # -- starting -----------------------------------------------------------

    def _name(self, kind: str) -> str:
        index = sum(1 for n in self.nodes.values() if n.kind == kind)
        return f"{kind}-{index}"

    def _node_dir(self, name: str) -> Path:
        path = self.dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _launch_members(self, nodes: list[Node], wait: bool) -> list[Node]:
        """Start every member of one quorum before waiting for any: a member is ready only with the others."""
        for node in nodes:
            self._launch(node, wait=False)
        if wait:
            for node in nodes:
                self.wait_ready(node.name)
        return nodes

    def _lock(self, name: str) -> threading.RLock:
        return self._locks.setdefault(name, threading.RLock())

    def _launch(self, node: Node, wait: bool) -> Node:
        with self._state:
            self.nodes[node.name] = node
        with self._lock(node.name):
            self._spawn(node)
            if wait:
                self.wait_ready(node.name)
        return node

    def _spawn(self, node: Node) -> None:
        with termination_held(), open(node.log, "ab") as log:  # a server is recorded before SIGTERM acts
            proc = subprocess.Popen(
                node.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **node.env},
                user=node.user,
                group=node.user,
                cwd=node.data_dir,
            )
            self._procs[node.name] = proc
            node.pid = proc.pid
        self._save()

    def wait_ready(self, name: str, deadline: float = START_DEADLINE) -> None:
        """Wait until `name` answers; on a lost port race, retry on a new port."""
        with self._lock(name):
            self._wait_ready(self.nodes[name], deadline)

    def _wait_ready(self, node: Node, deadline: float) -> None:
        name = node.name
        for attempt in range(START_ATTEMPTS):
            end = time.monotonic() + deadline
            while time.monotonic() < end:
                if ready(node):
                    return
                proc = self._procs.get(name)
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(POLL)
            else:
                raise ServerStartError(
                    f"no answer on port {node.port} within {deadline:.0f}s", name=name, log=tail(node.log)
                )
            log = tail(node.log)
            if "in use" not in log or attempt == START_ATTEMPTS - 1:
                raise ServerStartError("exited during start", name=name, log=log)
            self._respawn_on_new_port(node)

    def _respawn_on_new_port(self, node: Node) -> None:
        old = str(node.port)
        node.port = free_port()
        node.argv = [str(node.port) if arg == old else arg for arg in node.argv]
        node.env = {key: str(node.port) if value == old else value for key, value in node.env.items()}
        if node.kind == "zookeeper":
            cfg = Path(node.data_dir) / "conf" / "zoo.cfg"
            cfg.write_text(cfg.read_text().replace(f"clientPort={old}", f"clientPort={node.port}"))
        if node.kind == "etcd":  # the client port sits inside the listen and advertise URLs
            node.argv = [arg.replace(f"{HOST}:{old}", node.address) for arg in node.argv]
        if node.kind == "haproxy":
            cfg = Path(node.data_dir) / HAPROXY_CFG
            cfg.write_text(cfg.read_text().replace(f"bind {HOST}:{old}", f"bind {node.address}"))
        self._spawn(node)

    # -- faults -------------------------------------------------------------

    def _signal(self, name: str, sig: signal.Signals) -> None:
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is None or not self.is_running(name):
                raise ClusterError(f"{name} is not running")
            for pid in [node.pid, *descendants(node.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def pause(self, name: str) -> None:
        """SIGSTOP the server and its children: it hangs, its sockets stay open (hung, not dead).

        Twice: the second pass lists the children of a server that can no longer fork, so it
        reaches one forked (a PostgreSQL backend for a new connection) while the first ran.
        """
        self._signal(name, signal.SIGSTOP)
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def kill(self, name: str) -> None:
        """SIGKILL the server and every process it started, no shutdown work: a crash."""
        with self._lock(name):
            self._signal(name, signal.SIGKILL)
            self._reap(name)

    def stop(self, name: str) -> None:
        """Orderly stop (SIGTERM; SIGINT for PostgreSQL's fast shutdown), SIGKILL past the deadline."""
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is None or not self.is_running(name):
                node.pid = None
                return
            self._signal(name, signal.SIGCONT)  # a paused server cannot handle SIGTERM
            os.killpg(node.pid, signal.SIGINT if node.kind == "postgres" else signal.SIGTERM)
            if not self._wait_gone(node.pid, STOP_GRACE.get(node.kind, STOP_DEADLINE)):
                with contextlib.suppress(ClusterError):  # it may exit between the wait and the kill
                    self._signal(name, signal.SIGKILL)
            self._reap(name)

    def restart(self, name: str, *, env: dict[str, str] | None = None) -> Node:
        """Start a stopped or killed node again on the same port and data dir."""
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is not None and alive(node.pid):
                self.kill(name)
            if env is not None:
                node.env = dict(env)
            self._spawn(node)
            self._wait_ready(node, START_DEADLINE)
        return node

    def restart_all(self, kind: str) -> list[Node]:
        """Kill every node of `kind` that still runs, start them all again with their data, then wait.

        The members of a quorum (ZooKeeper, etcd) are started together: none of
        them is ready alone, so restarting them one by one would never finish.
        """
        nodes = [n for n in self.nodes.values() if n.kind == kind]
        if not nodes:
            raise ClusterError(f"this cluster has no {kind}")
        for node in nodes:
            with self._lock(node.name):
                if node.pid is not None and alive(node.pid):
                    self.kill(node.name)
        for node in nodes:
            with self._lock(node.name):
                self._spawn(node)
        for node in nodes:
            self.wait_ready(node.name)
        return nodes

    def is_running(self, name: str) -> bool:
        """Its process runs: our own unreaped child (never a reused PID; one just started may still be
        exec'ing, its command line not yet readable), or a PID whose command line is the node's."""
        node = self.nodes[name]
        proc = self._procs.get(name)
        if proc is not None and proc.pid == node.pid and proc.poll() is None:
            return True
        return node.pid is not None and runs(node.pid, node.argv[0])

    def _wait_gone(self, pid: int, deadline: float) -> bool:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            proc = next((p for p in self._procs.values() if p.pid == pid), None)
            if proc is not None:
                proc.poll()
            if not alive(pid):
                return True
            time.sleep(POLL)
        return False

    def _reap(self, name: str) -> None:
        with self._lock(name):
            node = self.nodes[name]
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.wait(timeout=STOP_DEADLINE)
            elif node.pid is not None:
                self._wait_gone(node.pid, STOP_DEADLINE)
            node.pid = None
            self._save()

    # -- stopping everything --------------------------------------------------

    def stop_all(self, *, remove: bool = True) -> None:
        """Stop every node this cluster started, then remove its state."""
        for name in reversed(list(self.nodes)):
            self.stop(name)
        if remove:
            for path in [*self._extra_dirs, str(self.dir)]:
                shutil.rmtree(path, ignore_errors=True)

    def _save(self) -> None:
        with self._state:  # one writer of the file at a time, each writing the table as it is then
            write_state(self.dir, self.nodes.values(), self._extra_dirs)
