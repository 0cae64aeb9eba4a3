"""The Redis tier: blocks shared between engine processes, on one server or a Redis Cluster.

redis-py (with hiredis, when installed, parsing replies) talks to the servers. Every batch is
one pipeline per server: EXISTS for lookups, GETRANGE, SET (optionally with a TTL), UNLINK.
Eviction is Redis's own: give the server `maxmemory` and `maxmemory-policy allkeys-lfu`
(approximated LFU with decay) or `allkeys-lru`, and a block that is gone is simply a miss.

Values are not trusted: a read asks for at most `max_bytes + 1` bytes of each (GETRANGE), so
a value planted under a block's key costs what a block costs, never its own size; one longer
than `max_bytes` is counted as corrupt ("size") and deleted.

Faults: no retries, and every call to a server ends by a deadline, `connect_timeout +
socket_timeout` after it began, however the server answers (redis-py's `socket_timeout` alone
bounds each receive, so a server sending a byte now and then could hold a call forever); each
server has a `CircuitBreaker`. A failing server costs at most `failure_threshold` such calls
before its breaker opens; then its keys are misses at once (the engine recomputes) until a
trial call after `cooldown_s` finds it back. In a cluster the breakers are per node, so one
dead node makes only its own slots miss.
"""

from __future__ import annotations

import contextlib
import functools
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlparse

from paged_kv.errors import InvalidArgument, PagedKVError
from paged_kv.tiers.base import Key, Tier, check_max_bytes
from paged_kv.tiers.breaker import CircuitBreaker
from paged_kv.validation import as_int, require_positive_int, require_seconds

# When the tier call running in this thread must end (time.monotonic()); None: no call.
_DEADLINE: ContextVar[float | None] = ContextVar("paged_kv_redis_deadline", default=None)


def _parse_url(url: object) -> Any:
    """The parsed `redis://` or `rediss://` URL with a host, else `InvalidArgument`."""
    parsed = urlparse(url) if isinstance(url, str) else None
    try:
        port_ok = parsed is not None and (parsed.port is None or parsed.port > 0)
    except ValueError:  # a port that is not a number, or beyond 65535
        port_ok = False
    if parsed is None or parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
        port_ok = False
    if not port_ok:
        raise InvalidArgument(f"{url!r} is not a redis:// URL (redis://host:port/db).")
    return parsed


def _check_nodes(nodes: object) -> list[tuple[str, int]]:
    """`[(host, port), ...]` of a cluster's seed nodes: host a name, port an int 1-65535."""
    if not isinstance(nodes, Sequence) or isinstance(nodes, str | bytes) or not nodes:
        raise InvalidArgument(
            f"cluster_nodes is a non-empty list of (host, port) pairs, got {nodes!r}."
        )
    checked: list[tuple[str, int]] = []
    for node in nodes:
        if not isinstance(node, Sequence) or isinstance(node, str | bytes) or len(node) != 2:
            raise InvalidArgument(f"a cluster node is a (host, port) pair, got {node!r}.")
        host, port = node
        number = as_int(port)
        if not isinstance(host, str) or not host or number is None or not 0 < number < 65536:
            raise InvalidArgument(
                f"a cluster node is (host name, port 1-65535), got {node!r}; e.g. "
                "('127.0.0.1', 7000)."
            )
        checked.append((host, number))
    return checked


def _redis() -> Any:
    try:
        import redis
    except ImportError as err:  # pragma: no cover - the tiers extra installs it
        raise PagedKVError(
            "the Redis tier needs redis-py: pip install 'paged_kv[tiers]' (or redis hiredis)."
        ) from err
    return redis


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Every socket operation of the connections below, in this thread, ends `seconds` from
    now at the latest."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class _DeadlineSocket:
    """A connected socket whose sends and receives also end at the deadline of the tier call
    in progress: each waits at most its own timeout and what is left of the call's time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._timeout = sock.gettimeout()

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._sock.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self._timeout

    def _bound(self) -> None:
        deadline = _DEADLINE.get()
        if deadline is None:
            self._sock.settimeout(self._timeout)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the Redis tier call ran out of time")
        self._sock.settimeout(left if self._timeout is None else min(self._timeout, left))

    def recv(self, *args: Any) -> bytes:
        self._bound()
        return self._sock.recv(*args)

    def recv_into(self, *args: Any) -> int:
        self._bound()
        return self._sock.recv_into(*args)

    def sendall(self, *args: Any) -> None:
        self._bound()
        self._sock.sendall(*args)

    def __getattr__(self, name: str) -> Any:  # fileno, shutdown, close, pending, ...
        return getattr(self._sock, name)


@functools.cache
def _deadline_connections() -> tuple[type, type]:
    """redis-py connection classes (plain, TLS) whose sockets keep the call's deadline."""
    redis = _redis()

    class DeadlineConnection(redis.connection.Connection):
        def _connect(self) -> Any:
            return _DeadlineSocket(super()._connect())

    class DeadlineSSLConnection(redis.connection.SSLConnection):
        def _connect(self) -> Any:
            return _DeadlineSocket(super()._connect())

    return DeadlineConnection, DeadlineSSLConnection


class _Endpoint:
    """One server: its client and its breaker."""

    def __init__(self, name: str, client: Any, breaker: CircuitBreaker) -> None:
        self.name = name
        self.client = client
        self.breaker = breaker


class RedisTier(Tier):
    """Blobs in Redis at `url` (standalone), or in the cluster reachable through
    `cluster_nodes` [(host, port), ...].

    A call to a server ends `connect_timeout + socket_timeout` seconds after it began at the
    latest, whatever the server sends; `failure_threshold` failures in a row open a server's
    breaker for `cooldown_s`. `ttl_s` gives keys an expiry.
    `clock` (seconds, monotonic; injectable for tests) times the cooldowns and the refresh of
    `usage()`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster_nodes: Sequence[tuple[str, int]] | None = None,
        socket_timeout: float = 0.25,
        connect_timeout: float = 0.25,
        failure_threshold: int = 3,
        cooldown_s: float = 1.0,
        ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("remote")
        if (url is None) == (cluster_nodes is None):
            raise InvalidArgument(
                "give the Redis tier either url='redis://host:port/db' (one server) or "
                "cluster_nodes=[(host, port), ...] (a Redis Cluster), not both or neither."
            )
        socket_timeout = require_seconds("socket_timeout", socket_timeout)
        connect_timeout = require_seconds("connect_timeout", connect_timeout)
        failure_threshold = require_positive_int("failure_threshold", failure_threshold)
        cooldown_s = require_seconds("cooldown_s", cooldown_s, allow_zero=True)
        if ttl_s is not None:
            ttl_s = require_seconds("ttl_s", ttl_s)
        if not callable(clock):
            raise InvalidArgument(f"clock is a function returning seconds, got {clock!r}.")
        parsed = None if url is None else _parse_url(url)
        nodes = None if cluster_nodes is None else _check_nodes(cluster_nodes)
        redis = _redis()
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.ttl_ms = None if ttl_s is None else max(1, int(ttl_s * 1000))
        self._clock = clock
        plain, tls = _deadline_connections()
        self._connection = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry": redis.retry.Retry(redis.backoff.NoBackoff(), 0),
            "connection_class": tls if parsed is not None and parsed.scheme == "rediss" else plain,
        }
        self._endpoints: dict[str, _Endpoint] = {}
        self._lock = threading.Lock()
        self._cluster: Any = None
        self._usage: tuple[int | None, int | None] = (None, None)
        self._usage_at = -math.inf
        self._evicted_keys: dict[str, int] = {}
        if parsed is not None:
            self.url = url
            self.cluster_nodes = None
            client = redis.Redis.from_url(url, **self._connection)
            name = f"{parsed.hostname}:{parsed.port or 6379}"
            self._endpoints[name] = _Endpoint(name, client, self._breaker())
        else:
            self.url = None
            self.cluster_nodes = nodes
            self._cluster_breaker = self._breaker()

    # -- the interface ---------------------------------------------------------------------

    def count_leading(self, keys: Sequence[Key]) -> int:
        present = self._per_key("contains", keys, lambda p, k: p.exists(k), lambda r: r == 1)
        n = 0
        for ok in present:
            if not ok:
                break
            n += 1
        return n

    def contains(self, keys: Sequence[Key]) -> list[bool]:
        """Presence of each key (one pipelined EXISTS per server)."""
        return self._per_key("contains", keys, lambda p, k: p.exists(k), lambda r: r == 1)

    def get_many(self, keys: Sequence[Key], max_bytes: int | None = None) -> list[bytes | None]:
        """At most `max_bytes + 1` bytes of each value (GETRANGE): one longer than
        `max_bytes` is counted as corrupt ("size") and deleted, never fetched whole. An empty
        value reads as absent (GETRANGE answers a missing key with an empty string)."""
        limit = check_max_bytes(max_bytes)
        began = time.perf_counter()
        blobs: list[bytes | None] = [None] * len(keys)
        oversized: list[Key] = []

        def keep(i: int, reply: object) -> bool:
            if not isinstance(reply, bytes) or not reply:
                return False
            if len(reply) > limit:
                oversized.append(keys[i])
                return False
            blobs[i] = reply
            return True

        self._run("get", keys, lambda p, k: p.getrange(k, 0, limit), keep, began)
        for _ in oversized:
            self.record_corrupt("size")
        if oversized:
            self.delete(oversized)
        self.record_moved("read", sum(len(b) for b in blobs if b is not None))
        return blobs

    def put_many(self, items: Sequence[tuple[Key, bytes]]) -> list[bool]:
        began = time.perf_counter()
        blobs = dict(items)
        ttl = self.ttl_ms
        ok = self._run(
            "put",
            [k for k, _ in items],
            lambda p, k: p.set(k, blobs[k], px=ttl),
            lambda i, reply: reply is True,
            began,
        )
        self.record_moved("write", sum(len(b) for (_, b), r in zip(items, ok, strict=True) if r))
        self._refresh_usage()
        return ok

    def delete(self, keys: Sequence[Key]) -> int:
        removed = [0]

        def count(i: int, reply: object) -> bool:
            if isinstance(reply, int) and reply > 0:
                removed[0] += 1
            return not isinstance(reply, Exception)

        self._run("delete", keys, lambda p, k: p.unlink(k), count, time.perf_counter())
        return removed[0]

    def usage(self) -> tuple[int | None, int | None]:
        """(keys, used memory) of the server(s), refreshed at most once a second; the whole
        server's figures (other users' keys count too)."""
        return self._usage

    @property
    def is_up(self) -> bool:
        """True when every known server's breaker is closed."""
        with self._lock:
            endpoints = list(self._endpoints.values())
        cluster_ok = self.cluster_nodes is None or self._cluster_breaker.is_closed
        return cluster_ok and all(e.breaker.is_closed for e in endpoints)

    def endpoint_states(self) -> dict[str, str]:
        """Each server's breaker state: closed (in use), open (cut off) or half-open."""
        with self._lock:
            return {name: e.breaker.state for name, e in self._endpoints.items()}

    def stall_budget_s(self, outage_s: float) -> float:
        """The most time calls to one server can cost the caller during an outage of
        `outage_s` seconds: `failure_threshold` calls cut off at their deadline
        (`connect_timeout + socket_timeout` each) before the breaker opens, then one trial
        call per cooldown."""
        per_call = self.connect_timeout + self.socket_timeout
        trials = math.ceil(outage_s / self.cooldown_s) if self.cooldown_s else math.inf
        return per_call * (self.failure_threshold + trials)

    def ping(self) -> bool:
        """Is every server reachable now? (Goes through the breakers.)"""
        if self.cluster_nodes is not None:
            cluster = self._cluster_client()
            if cluster is None:
                return False
            for node in cluster.get_primaries():
                self._endpoint_of(cluster, node)
        with self._lock:
            endpoints = list(self._endpoints.values())
        results = [self._call(e, "ping", lambda c: c.ping(), 1) for e in endpoints]
        return all(r is True for r in results)

    def close(self) -> None:
        with self._lock:
            endpoints = list(self._endpoints.values())
        for endpoint in endpoints:
            endpoint.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def node_of(self, key: Key) -> str | None:
        """In a cluster: the "host:port" serving `key`'s slot (None when unknown)."""
        groups = self._group([key])
        return next(iter(groups), None)

    # -- plumbing --------------------------------------------------------------------------

    def _breaker(self) -> CircuitBreaker:
        return CircuitBreaker(self.failure_threshold, self.cooldown_s, clock=self._clock)

    def _cluster_client(self) -> Any:
        """The RedisCluster client (slot map and node clients), made on first use."""
        if self._cluster is not None:
            return self._cluster
        if not self._cluster_breaker.allow():
            return None
        redis = _redis()
        from redis.cluster import ClusterNode, RedisCluster

        (host, port), *others = self.cluster_nodes or []
        # redis-py gives the nodes' clients our connection class only when the cluster is
        # made from a URL: the first seed node's, the others as startup nodes
        address = f"[{host}]" if ":" in host else host
        try:
            with _deadline((1 + len(others)) * (self.connect_timeout + self.socket_timeout)):
                cluster = RedisCluster(
                    url=f"redis://{address}:{port}/0",
                    startup_nodes=[ClusterNode(h, p) for h, p in others],
                    require_full_coverage=False,
                    **self._connection,
                )
        except (redis.exceptions.RedisError, OSError):
            self._cluster_breaker.record_failure()
            return None
        self._cluster_breaker.record_success()
        self._cluster = cluster
        return cluster

    def _group(self, keys: Sequence[Key]) -> dict[str, list[int]]:
        """Indices of `keys` by the server that holds them ("" for keys with no server)."""
        if self.cluster_nodes is None:
            return {next(iter(self._endpoints)): list(range(len(keys)))}
        cluster = self._cluster_client()
        if cluster is None:
            return {"": list(range(len(keys)))}
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            try:
                node = cluster.get_node_from_key(key)
            except Exception:  # slot not covered: no server for it
                groups.setdefault("", []).append(i)
                continue
            groups.setdefault(self._endpoint_of(cluster, node).name, []).append(i)
        return groups

    def _endpoint_of(self, cluster: Any, node: Any) -> _Endpoint:
        """The endpoint (client and breaker) of a cluster node, made on first use."""
        with self._lock:
            endpoint = self._endpoints.get(node.name)
            if endpoint is None:
                client = cluster.get_redis_connection(node)
                endpoint = self._endpoints[node.name] = _Endpoint(
                    node.name, client, self._breaker()
                )
            return endpoint

    def _call(self, endpoint: _Endpoint, op: str, fn: Callable[[Any], Any], n: int) -> Any:
        """`fn(client)` through the server's breaker; None when refused or failed."""
        redis = _redis()
        if not endpoint.breaker.allow():
            self.record(op, "skipped", n)
            return None
        try:
            with _deadline(self.connect_timeout + self.socket_timeout):
                result = fn(endpoint.client)
        except (redis.exceptions.RedisError, OSError):
            endpoint.breaker.record_failure()
            self.record(op, "error", n)
            self.recorder.up(self.name, self.is_up)
            return None
        endpoint.breaker.record_success()
        self.recorder.up(self.name, self.is_up)
        return result

    def _run(
        self,
        op: str,
        keys: Sequence[Key],
        command: Callable[[Any, Key], Any],
        accept: Callable[[int, object], bool],
        began: float,
    ) -> list[bool]:
        """One pipeline per server; `accept(i, reply)` turns key i's reply into its result."""
        results = [False] * len(keys)
        for name, indices in self._group(keys).items():
            if not name:
                self.record(op, "error", len(indices))
                continue

            def pipeline(client: Any, indices: list[int] = indices) -> list[Any]:
                pipe = client.pipeline(transaction=False)
                for i in indices:
                    command(pipe, keys[i])
                return pipe.execute(raise_on_error=False)

            replies = self._call(self._endpoints[name], op, pipeline, len(indices))
            if replies is None:
                continue
            for i, reply in zip(indices, replies, strict=True):
                results[i] = accept(i, reply)
            outcomes = [results[i] for i in indices]
            self.record_results(op, outcomes, time.perf_counter() - began)
        return results

    def _per_key(
        self,
        op: str,
        keys: Sequence[Key],
        command: Callable[[Any, Key], Any],
        test: Callable[[object], bool],
    ) -> list[bool]:
        return self._run(op, keys, command, lambda _, reply: test(reply), time.perf_counter())

    def _refresh_usage(self) -> None:
        """Keys, used memory and evictions from INFO, at most once a second."""
        now = self._clock()
        if now - self._usage_at < 1.0:
            return
        self._usage_at = now
        blocks = used = 0
        with self._lock:
            endpoints = list(self._endpoints.values())
        for endpoint in endpoints:
            info = self._call(endpoint, "info", lambda c: c.info(), 1)
            if info is None:
                continue
            used += int(info.get("used_memory", 0))
            blocks += sum(int(v.get("keys", 0)) for k, v in info.items() if k.startswith("db"))
            evicted = int(info.get("evicted_keys", 0))
            before = self._evicted_keys.get(endpoint.name, evicted)
            self._evicted_keys[endpoint.name] = evicted
            self.record_evictions(max(0, evicted - before))
        self._usage = (blocks, used)
        self.report_usage()
