"""Prometheus metrics of the prefix cache and the tiers, through `prometheus_client`.

One `CollectorRegistry` per store (so engines and tests never collide), conventional names
(`_total` counters, seconds and bytes as units), an exposition text (`exposition()`), and a
real HTTP endpoint on 127.0.0.1 for a scraper (`serve()`).

    paged_kv_prefix_cache_queries_total              prompt tokens looked up at admission
    paged_kv_prefix_cache_hits_total{tier}           of those, found on the device or in a tier
    paged_kv_prompt_tokens_total{source}             admitted prompt tokens by where their K/V
                                                     came from: computed, device, host, disk,
                                                     remote (they add up to the queries)
    paged_kv_tier_operations_total{tier,op,result}   contains/get/put/delete: ok, miss, error,
                                                     skipped (breaker open), dropped (queue full)
    paged_kv_tier_operation_duration_seconds{tier,op}  latency histogram
    paged_kv_tier_bytes_total{tier,direction}        bytes read / written
    paged_kv_tier_evictions_total{tier}              blocks evicted to make room
    paged_kv_tier_corrupt_blocks_total{tier,reason}  blobs that failed verification
    paged_kv_tier_blocks{tier}, paged_kv_tier_used_bytes{tier}, paged_kv_tier_up{tier},
    paged_kv_tier_write_queue_blocks{tier}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paged_kv.errors import InvalidArgument, PagedKVError
from paged_kv.tiers.base import Recorder

try:
    import prometheus_client as prom
except ImportError as err:  # pragma: no cover - the tiers extra installs it
    raise PagedKVError(
        "tier metrics need prometheus_client: pip install 'paged_kv[tiers]'."
    ) from err

SOURCES = ("computed", "device", "host", "disk", "remote")
LATENCY_BUCKETS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


class TierMetrics(Recorder):
    """The store's and the engine's metrics in their own registry (`self.registry`)."""

    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else prom.CollectorRegistry()
        self.queries = prom.Counter(
            "paged_kv_prefix_cache_queries", "Prompt tokens looked up at admission.", registry=r
        )
        self.hits = prom.Counter(
            "paged_kv_prefix_cache_hits",
            "Prompt tokens found cached, by the tier that held them.",
            ["tier"],
            registry=r,
        )
        self.prompt_tokens = prom.Counter(
            "paged_kv_prompt_tokens",
            "Admitted prompt tokens by where their K/V came from.",
            ["source"],
            registry=r,
        )
        self.operations = prom.Counter(
            "paged_kv_tier_operations",
            "Keys handled by tier operations, by result.",
            ["tier", "op", "result"],
            registry=r,
        )
        self.latency = prom.Histogram(
            "paged_kv_tier_operation_duration_seconds",
            "Duration of one tier call (a batch of keys).",
            ["tier", "op"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bytes = prom.Counter(
            "paged_kv_tier_bytes", "Bytes moved to or from a tier.", ["tier", "direction"],
            registry=r,
        )  # fmt: skip
        self.evictions = prom.Counter(
            "paged_kv_tier_evictions", "Blocks a tier evicted to make room.", ["tier"], registry=r
        )
        self.corrupt_blocks = prom.Counter(
            "paged_kv_tier_corrupt_blocks",
            "Blobs that failed verification (counted, deleted, treated as misses).",
            ["tier", "reason"],
            registry=r,
        )
        self.blocks = prom.Gauge(
            "paged_kv_tier_blocks", "Blocks (keys) a tier holds.", ["tier"], registry=r
        )
        self.used_bytes = prom.Gauge(
            "paged_kv_tier_used_bytes", "Bytes a tier uses.", ["tier"], registry=r
        )
        self.tier_up = prom.Gauge(
            "paged_kv_tier_up", "1 while a tier is in use, 0 while it is cut off.", ["tier"],
            registry=r,
        )  # fmt: skip
        self.write_queue = prom.Gauge(
            "paged_kv_tier_write_queue_blocks",
            "Blocks waiting in a tier's background write queue.",
            ["tier"],
            registry=r,
        )
        for source in SOURCES:  # every series exists from the start (a scraper sees zeros)
            self.prompt_tokens.labels(source)
            if source != "computed":
                self.hits.labels(source)

    # -- Recorder (called by the tiers and the store) ----------------------------------------

    def op(
        self, tier: str, op: str, result: str, count: int = 1, seconds: float | None = None
    ) -> None:
        self.operations.labels(tier, op, result).inc(count)
        if seconds is not None:
            self.latency.labels(tier, op).observe(seconds)

    def moved(self, tier: str, direction: str, nbytes: int) -> None:
        self.bytes.labels(tier, direction).inc(nbytes)

    def evicted(self, tier: str, count: int) -> None:
        self.evictions.labels(tier).inc(count)

    def corrupt(self, tier: str, reason: str) -> None:
        self.corrupt_blocks.labels(tier, reason).inc()

    def usage(self, tier: str, blocks: int | None, nbytes: int | None) -> None:
        if blocks is not None:
            self.blocks.labels(tier).set(blocks)
        if nbytes is not None:
            self.used_bytes.labels(tier).set(nbytes)

    def up(self, tier: str, is_up: bool) -> None:
        self.tier_up.labels(tier).set(1 if is_up else 0)

    def queue_depth(self, tier: str, depth: int) -> None:
        self.write_queue.labels(tier).set(depth)

    # -- called by the engine at admission -------------------------------------------------

    def admitted(self, sources: dict[str, int]) -> None:
        """One admission: prompt tokens by source (computed, device, host, disk, remote)."""
        unknown = set(sources) - set(SOURCES)
        if unknown:
            raise InvalidArgument(f"unknown token sources {sorted(unknown)}; use {SOURCES}.")
        self.queries.inc(sum(sources.values()))
        for source, tokens in sources.items():
            if tokens:
                self.prompt_tokens.labels(source).inc(tokens)
                if source != "computed":
                    self.hits.labels(source).inc(tokens)

    # -- reading -----------------------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """One sample's value (0 when the series does not exist yet)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    def snapshot(self) -> MetricsSnapshot:
        """The headline counters now, for tables and plots over time."""
        v = self.value
        return MetricsSnapshot(
            queries=v("paged_kv_prefix_cache_queries_total"),
            hits={t: v("paged_kv_prefix_cache_hits_total", tier=t) for t in SOURCES[1:]},
            prompt_tokens={s: v("paged_kv_prompt_tokens_total", source=s) for s in SOURCES},
        )

    def exposition(self) -> str:
        """The Prometheus text exposition of every metric."""
        return prom.generate_latest(self.registry).decode()

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> MetricsServer:
        """Serve /metrics over HTTP on `addr` (loopback by default) and a free port (0)."""
        server, thread = prom.start_http_server(port, addr=addr, registry=self.registry)
        return MetricsServer(server, thread)


@dataclass(frozen=True)
class MetricsSnapshot:
    queries: float
    hits: dict[str, float]
    prompt_tokens: dict[str, float]


class MetricsServer:
    """A running exposition endpoint; `url` to scrape, `close()` to stop it."""

    def __init__(self, server: Any, thread: Any) -> None:
        self._server, self._thread = server, thread
        self.host, self.port = server.server_address[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
