"""Real `redis-server` processes on 127.0.0.1 for the tests, the chapter and the benchmark.

Each server listens on loopback only, on a free port, with persistence off and its files in
a temporary directory; it is stopped (or killed, to test faults) by its process id. A
three-node Redis Cluster is made the same way and joined with CLUSTER ADDSLOTSRANGE and
CLUSTER MEET. Every wait is bounded in time.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from paged_kv.errors import PagedKVError

LOOPBACK = "127.0.0.1"
NUM_SLOTS = 16384


class RedisNotInstalled(PagedKVError):
    """No `redis-server` binary on PATH."""


def redis_server_path() -> str | None:
    """The `redis-server` binary, or None when it is not installed."""
    return shutil.which("redis-server")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class RedisServer:
    """One `redis-server` on 127.0.0.1. `start()`, `stop()` (SIGTERM, then SIGKILL), `kill()`
    (SIGKILL: a crash), `pause()`/`resume()` (SIGSTOP/SIGCONT: a hung server), `restart()`
    on the same port. A context manager; the server is stopped on exit whatever happened.

    `maxmemory` (bytes) with `policy` ("allkeys-lru", "allkeys-lfu", "noeviction", ...)
    makes Redis evict by itself; `cluster=True` starts a cluster-enabled node.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        maxmemory: int | None = None,
        policy: str = "allkeys-lru",
        cluster: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        binary = redis_server_path()
        if binary is None:
            raise RedisNotInstalled(
                "redis-server is not installed; on Debian/Ubuntu: apt-get install redis-server "
                "(conda: conda install -c conda-forge redis-server)."
            )
        self.binary = binary
        self.port = port or free_port()
        self.bus_port = free_port() if cluster else None  # cluster bus: a port of its own
        self.maxmemory = maxmemory
        self.policy = policy
        self.cluster = cluster
        self.extra_args = extra_args
        self.dir = Path(tempfile.mkdtemp(prefix="paged_kv-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        atexit.register(self.close)  # never outlive the Python process that made it

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def command(self) -> list[str]:
        args = [
            self.binary,
            "--bind", LOOPBACK,
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        if self.maxmemory is not None:
            args += ["--maxmemory", str(self.maxmemory), "--maxmemory-policy", self.policy]
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.dir / "nodes.conf"),
                "--cluster-port", str(self.bus_port),
                "--cluster-node-timeout", "2000",
                "--cluster-require-full-coverage", "no",
            ]  # fmt: skip
        return args + list(self.extra_args)

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and wait (at most `timeout_s`) until it answers PING."""
        if self.process is not None and self.process.poll() is None:
            return self
        if self.cluster:  # a restarted node forgets its old cluster identity
            with contextlib.suppress(OSError):
                (self.dir / "nodes.conf").unlink()
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PagedKVError(
                    f"redis-server exited at start with code {self.process.returncode}; see "
                    f"{self.dir / 'redis.log'} (port {self.port} taken?)."
                )
            if self.ping():
                return self
            time.sleep(0.01)
        self.stop()
        raise PagedKVError(f"redis-server on port {self.port} did not answer within {timeout_s} s.")

    def ping(self, timeout_s: float = 0.2) -> bool:
        """Does the server answer PING (raw RESP over a socket: no client library needed)?"""
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=timeout_s) as s:
                s.settimeout(timeout_s)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed) and reap it."""
        self._signal(signal.SIGKILL)
        self._reap(5.0)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its socket but answers nothing (a hung store)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (SIGCONT first, in case it is paused), then SIGKILL after 5 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        if not self._reap(5.0):
            self._signal(signal.SIGKILL)
            self._reap(5.0)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        atexit.unregister(self.close)
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)

    def _reap(self, timeout_s: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def __repr__(self) -> str:
        running = self.process is not None and self.process.poll() is None
        return f"RedisServer({self.url}, pid {self.pid}, {'running' if running else 'stopped'})"


class RedisClusterNodes:
    """`num_nodes` cluster-enabled servers on 127.0.0.1 joined into one cluster, each serving
    an equal range of the 16384 slots, no replicas (a killed node's slots are simply gone).
    A context manager; `nodes[i].kill()` kills one."""

    def __init__(self, num_nodes: int = 3) -> None:
        self.nodes = [RedisServer(cluster=True) for _ in range(num_nodes)]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(LOOPBACK, n.port) for n in self.nodes]

    def start(self, timeout_s: float = 20.0) -> RedisClusterNodes:
        import redis

        clients = []
        try:
            for node in self.nodes:
                node.start()
                clients.append(redis.Redis(host=LOOPBACK, port=node.port, socket_timeout=2))
            per_node = NUM_SLOTS // len(self.nodes)
            for i, client in enumerate(clients):
                last = NUM_SLOTS - 1 if i == len(clients) - 1 else (i + 1) * per_node - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per_node, last)
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER", "MEET", LOOPBACK, node.port, node.bus_port)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if all("cluster_state:ok" in t for t in texts):  # every node sees every slot
                    return self
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise
        finally:
            for client in clients:
                client.close()
        self.close()
        raise PagedKVError(f"the Redis Cluster did not become ready within {timeout_s} s.")

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> RedisClusterNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
