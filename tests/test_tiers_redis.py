"""The Redis tier against real redis-server processes on 127.0.0.1 (acceptance tests 4-8 and
10). Every server is started on a free port and stopped by process id at the end; the tests
skip with the reason where redis-server is absent, and fail instead when CI=true."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
import tracemalloc

import pytest
import redis
from redis.crc import key_slot
from test_tiers_base import MUTANTS_SPACE
from tiers_helpers import (
    BLOCK,
    model,
    question,
    reference_tokens,
    require_redis_server,
    run_worker,
    system_prompt,
)

from paged_kv.cache.hashing import block_hashes
from paged_kv.errors import InvalidArgument
from paged_kv.serving.engine import Engine
from paged_kv.serving.scheduler import SamplingParams
from paged_kv.tiers import (
    KeySpace,
    RedisClusterNodes,
    RedisServer,
    RedisTier,
    TieredStore,
    decode_blob,
    fingerprint_model,
)
from paged_kv.tiers.redis_tier import _deadline_connections

QUESTIONS = ("What is paging?", "Why blocks?", "Who evicts?", "When to preempt?")


def space(seed: int = 0) -> KeySpace:
    return KeySpace("paged_kv", fingerprint_model(model(seed), BLOCK))


def prompt_keys(prompt: list[int], salt: str | None = None) -> list[str]:
    return space().keys(block_hashes(prompt, BLOCK, salt=salt))


def raw_client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=2)


def serve(store: TieredStore, prompts: list[list[int]], new: int = 8, **engine_args):
    """A fresh engine (empty device pool) on `store`; its tokens and its engine."""
    engine = Engine(model(), num_blocks=64, block_size=BLOCK, store=store, **engine_args)
    return [c.token_ids for c in engine.generate(prompts, new)], engine


@pytest.fixture
def redis_server(request):
    """A fresh redis-server on 127.0.0.1 and a free port, stopped by pid at the end."""
    require_redis_server()
    server = RedisServer()
    request.addfinalizer(server.close)
    return server.start()


@pytest.fixture
def redis_cluster(request):
    """Three cluster-enabled redis-servers on 127.0.0.1 joined into one cluster."""
    require_redis_server()
    cluster = RedisClusterNodes(3)
    request.addfinalizer(cluster.close)
    return cluster.start()


@pytest.fixture
def redis_factory(request):
    """Start servers with options; every one is stopped by pid at teardown."""
    require_redis_server()
    servers = []

    def start(**options) -> RedisServer:
        server = RedisServer(**options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.close()


# -- the client wrapper ----------------------------------------------------------------------


def test_a_missing_redis_server_skips_with_the_reason_but_fails_in_ci(monkeypatch):
    import tiers_helpers

    monkeypatch.setattr(tiers_helpers, "redis_server_path", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run them"):
        tiers_helpers.require_redis_server()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install redis-server"):
        tiers_helpers.require_redis_server()


def test_redis_tier_answers_the_five_operations_with_pipelines(redis_server):
    tier = RedisTier(redis_server.url)
    keys = [f"t:{'a' * 32}:{i:064x}" for i in range(5)]
    assert tier.put_many([(k, b"blob %d" % i) for i, k in enumerate(keys[:3])]) == [True] * 3
    assert tier.count_leading(keys) == 3 and tier.contains(keys) == [True] * 3 + [False] * 2
    assert tier.get_many([keys[1], keys[4]]) == [b"blob 1", None]
    assert tier.delete([keys[0], keys[4]]) == 1 and tier.count_leading(keys) == 0
    stats = tier.stats()
    assert stats.count("put", "ok") == 3 and stats.count("get", "miss") == 1
    assert stats.blocks == 3 and stats.used_bytes > 0 and stats.up
    assert raw_client(redis_server).get(keys[2]) == b"blob 2"
    tier.close()


def test_keys_can_expire(redis_server):
    tier = RedisTier(redis_server.url, ttl_s=0.2)
    tier.put_many([("t:x", b"1")])
    assert 0 < raw_client(redis_server).pttl("t:x") <= 200
    deadline = time.monotonic() + 5
    while tier.count_leading(["t:x"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tier.count_leading(["t:x"]) == 0


def test_bad_redis_arguments_say_what_to_pass():
    require_redis_server()
    with pytest.raises(InvalidArgument, match="either url"):
        RedisTier()
    with pytest.raises(InvalidArgument, match="either url"):
        RedisTier("redis://127.0.0.1:1/0", cluster_nodes=[("127.0.0.1", 1)])
    with pytest.raises(InvalidArgument, match="redis://"):
        RedisTier("http://127.0.0.1:6379")
    with pytest.raises(InvalidArgument, match="socket_timeout"):
        RedisTier("redis://127.0.0.1:1/0", socket_timeout=0)
    with pytest.raises(InvalidArgument, match="ttl_s"):
        RedisTier("redis://127.0.0.1:1/0", ttl_s=-1)


def test_a_hung_server_costs_at_most_the_timeouts_until_the_breaker_opens(redis_server):
    tier = RedisTier(
        redis_server.url, socket_timeout=0.1, connect_timeout=0.1, failure_threshold=2,
        cooldown_s=60,
    )  # fmt: skip
    keys = ["t:a", "t:b"]
    tier.put_many([(k, b"v") for k in keys])
    redis_server.pause()  # SIGSTOP: the socket stays open, nothing answers
    try:
        times = []
        for _ in range(5):
            began = time.perf_counter()
            assert tier.count_leading(keys) == 0
            times.append(time.perf_counter() - began)
    finally:
        redis_server.resume()
    assert all(t < 1.0 for t in times[:2]), times  # each failure costs about socket_timeout
    assert sum(times[2:]) < 0.05, "with the breaker open, calls are refused at once"
    assert not tier.is_up and tier.stats().count("contains", "skipped") == 6
    assert tier.endpoint_states() == {f"127.0.0.1:{redis_server.port}": "open"}


# -- acceptance tests ------------------------------------------------------------------------


def test_acceptance_4_two_processes_share_a_system_prompt_through_redis(redis_server):
    system = system_prompt(192)
    first = system + question("When does the library open on Sundays?")
    second = system + question("Can I renew a loan online?")
    a = run_worker("--prompts", json.dumps([first]), "--redis", redis_server.url)
    assert a["flushed"] and a["tokens"] == reference_tokens([first], 8)
    b = run_worker("--prompts", json.dumps([second]), "--redis", redis_server.url)
    assert b["tokens"] == reference_tokens([second], 8)
    assert b["hits"]["remote"] == 192, "the whole system prompt came from Redis"
    assert b["computed"] == len(second) - 192, "only its own question was computed"


def test_acceptance_5_another_salt_or_fingerprint_gets_no_remote_hits(redis_server):
    prompt = system_prompt(128) + question("Where are the toilets?")
    want = reference_tokens([prompt], 8)

    def remote_hits(seed: int, salt: str | None) -> float:
        store = TieredStore([RedisTier(redis_server.url)])
        engine = Engine(model(seed), num_blocks=64, block_size=BLOCK, store=store)
        tokens = engine.generate([prompt], 8, salt=salt)[0].token_ids
        assert store.flush()
        if seed == 0:
            assert tokens == want[0]
        hits = store.metrics.snapshot().hits["remote"]
        store.close()
        return hits

    assert remote_hits(0, "tenant-a") == 0  # stores the blocks
    assert remote_hits(0, "tenant-b") == 0, "another tenant's salt"
    assert remote_hits(0, None) == 0, "no salt is a salt of its own"
    assert remote_hits(1, "tenant-a") == 0, "another model's fingerprint (other weights)"
    everything_but_the_tail = (len(prompt) - 1) // BLOCK * BLOCK
    assert remote_hits(0, "tenant-a") == everything_but_the_tail, "the same tenant and model hit"


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_acceptance_6_redis_dies_mid_run_and_every_request_still_finishes(redis_server, fault):
    # Four tenants, each with its own 96-token system prompt in Redis. The first tenant's two
    # requests run when Redis fails; the other tenants arrive after it and must ask Redis
    # (their prompts are not on the device), so the breaker sees the outage whatever the
    # background writer has or has not written by then.
    tenants = [(list(f"[tenant {i}] ".encode()) + system_prompt(96))[:96] for i in range(4)]
    prompts = [tenants[0] + question(q) for q in QUESTIONS[:2]]
    prompts += [tenant + question(q) for tenant, q in zip(tenants[1:], QUESTIONS[1:], strict=True)]
    want = reference_tokens(prompts, 12)
    tier = RedisTier(
        redis_server.url, socket_timeout=0.1, connect_timeout=0.1, failure_threshold=2,
        cooldown_s=0.5,
    )  # fmt: skip
    store = TieredStore([tier])
    serve(store, [tenant + question(QUESTIONS[0]) for tenant in tenants], 12)
    assert store.flush()  # Redis holds every tenant's system prompt
    engine = Engine(model(), num_blocks=64, block_size=BLOCK, max_running=2, store=store)
    stalls = []  # time the engine spends asking the tiers, after the fault
    ask = engine.connector.loadable_tokens

    def timed(sequence, hits):
        began = time.perf_counter()
        try:
            return ask(sequence, hits)
        finally:
            if faulted_at is not None:
                stalls.append(time.perf_counter() - began)

    engine.connector.loadable_tokens = timed  # the scheduler asks through this
    ids = [engine.add_request(p, SamplingParams(12)) for p in prompts]
    faulted_at, steps = None, 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        if steps == 3:
            redis_server.kill() if fault == "kill" else redis_server.pause()
            faulted_at = time.monotonic()
    outage = time.monotonic() - faulted_at
    try:
        assert [engine.completion(i).token_ids for i in ids] == want
        budget = tier.stall_budget_s(outage)
        assert sum(stalls) <= budget + 0.3, f"stalled {sum(stalls):.2f} s, budget {budget:.2f} s"
        assert len(stalls) >= 3, "the other tenants were admitted during the outage"
        assert not tier.is_up
        assert store.metrics.value("paged_kv_tier_up", tier="remote") == 0
    finally:
        redis_server.start() if fault == "kill" else redis_server.resume()
    time.sleep(0.6)  # one cooldown: the next call is the trial that finds Redis back
    tokens, _ = serve(store, prompts[:1], 12)  # after a kill Redis is empty: this refills it
    assert tokens == want[:1] and store.flush()
    before = store.metrics.snapshot().hits["remote"]
    tokens, _ = serve(store, prompts[1:2], 12)
    assert tokens == want[1:2]
    assert store.metrics.snapshot().hits["remote"] - before == 96, "remote hits resume"
    assert tier.is_up and store.metrics.value("paged_kv_tier_up", tier="remote") == 1
    store.close()


def test_acceptance_7_a_flipped_bit_in_redis_is_counted_deleted_and_recomputed(redis_server):
    prompt = system_prompt(128) + question("Fees?")
    want = reference_tokens([prompt], 8)
    store = TieredStore([RedisTier(redis_server.url)])
    serve(store, [prompt])
    assert store.flush()
    key = prompt_keys(prompt)[3]
    client = raw_client(redis_server)
    value = bytearray(client.get(key))
    value[len(value) // 2] ^= 0x20  # one bit of the payload
    client.set(key, bytes(value))
    tokens, engine = serve(store, [prompt])
    assert tokens == want
    assert store.metrics.snapshot().hits["remote"] == 3 * BLOCK, "the run stops at the bad block"
    assert (
        store.metrics.value(
            "paged_kv_tier_corrupt_blocks_total", tier="remote", reason="payload checksum"
        )
        == 1
    )
    assert store.tier("remote").stats().count("delete", "ok") == 1
    assert engine.stats().prefill_tokens_computed == len(prompt) - 3 * BLOCK
    assert store.flush()  # the recomputed block went back to Redis, whole
    decode_blob(
        client.get(key), fingerprint=space().fingerprint_digest, block_hash=block_hashes(
            prompt, BLOCK)[3]
    )  # fmt: skip
    store.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "noeviction"])
def test_acceptance_8_a_tiny_maxmemory_cuts_hits_at_the_first_missing_block(redis_factory, policy):
    probe = redis_factory()
    baseline = int(raw_client(probe).info("memory")["used_memory"])
    # Room for about 30 blobs of 8 KiB with Redis's overheads (a pipeline's query buffer
    # counts too): the prompt's 30 blocks do not all fit.
    server = redis_factory(maxmemory=baseline + 300_000, policy=policy)
    prompt = (system_prompt(192) * 3)[:480] + question("Is there a quiet room?")
    want = reference_tokens([prompt], 8)
    store = TieredStore([RedisTier(server.url)], batch_blocks=8)
    tokens, _ = serve(store, [prompt])
    assert tokens == want and store.flush()
    keys = prompt_keys(prompt)[: (len(prompt) - 1) // BLOCK]
    present = [bool(raw_client(server).exists(k)) for k in keys]
    assert 0 < sum(present) < len(keys), present
    leading = present.index(False)
    tokens, _ = serve(store, [prompt])
    assert tokens == want
    assert store.metrics.snapshot().hits["remote"] == leading * BLOCK
    if policy == "noeviction":  # Redis refused writes past its memory: errors, not raised
        assert store.tier("remote").stats().count("put", "error") > 0
    else:  # Redis evicted by sampling (approximated LRU / LFU), not the tails first
        assert raw_client(server).info("stats")["evicted_keys"] > 0
    store.close()


def test_acceptance_10_a_three_node_cluster_spreads_blocks_and_survives_a_dead_node(
    redis_cluster,
):
    prompt = (system_prompt(192) * 3)[:480] + question("Opening hours at Easter?")
    want = reference_tokens([prompt], 8)
    tier = RedisTier(
        cluster_nodes=redis_cluster.startup_nodes, socket_timeout=0.2, connect_timeout=0.2
    )
    store = TieredStore([tier])
    tokens, _ = serve(store, [prompt])
    assert tokens == want and store.flush()
    keys = prompt_keys(prompt)[: (len(prompt) - 1) // BLOCK]
    nodes = [tier.node_of(k) for k in keys]
    assert len(set(nodes)) == 3, "every node holds some of the prompt's blocks"
    assert len({key_slot(k.encode()) for k in keys}) == len(keys), "no hash tag: spread slots"
    assert all(tier.count_leading([k]) for k in keys)
    dead = redis_cluster.nodes[1]
    dead.kill()
    dead_name = f"127.0.0.1:{dead.port}"
    got = tier.get_many(keys)
    assert [b is not None for b in got] == [n != dead_name for n in nodes]
    tokens, _ = serve(store, [prompt])
    assert tokens == want
    leading = [n != dead_name for n in nodes].index(False)
    remote = store.metrics.snapshot().hits["remote"]
    assert remote == leading * BLOCK, "hits stop at the first block on the dead node"
    assert tier.endpoint_states()[dead_name] in ("open", "closed")
    assert [tier.count_leading([k]) for k in keys] == [int(n != dead_name) for n in nodes]
    store.close()


# -- arguments refused with a typed error before any client is made ------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"url": 123}, "redis:// URL"),
        ({"url": "http://127.0.0.1:6379"}, "redis:// URL"),
        ({"url": "redis://127.0.0.1:x/0"}, "redis:// URL"),
        ({"url": "redis://127.0.0.1:70000/0"}, "redis:// URL"),
        ({"url": None}, "either url"),
        ({"socket_timeout": "1"}, "socket_timeout"),
        ({"socket_timeout": math.inf}, "socket_timeout"),
        ({"socket_timeout": math.nan}, "socket_timeout"),
        ({"socket_timeout": True}, "socket_timeout"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"cooldown_s": math.inf}, "cooldown_s"),
        ({"cooldown_s": -1}, "cooldown_s"),
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"failure_threshold": "3"}, "failure_threshold"),
        ({"ttl_s": math.inf}, "ttl_s"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"clock": 5}, "clock"),
        ({"url": None, "cluster_nodes": [("127.0.0.1", "x")]}, "port 1-65535"),
        ({"url": None, "cluster_nodes": [("127.0.0.1", 0)]}, "port 1-65535"),
        ({"url": None, "cluster_nodes": [("127.0.0.1", 7000.5)]}, "port 1-65535"),
        ({"url": None, "cluster_nodes": [("", 7000)]}, "port 1-65535"),
        ({"url": None, "cluster_nodes": ["127.0.0.1:7000"]}, r"\(host, port\) pair"),
        ({"url": None, "cluster_nodes": []}, "non-empty list"),
        ({"url": None, "cluster_nodes": "127.0.0.1:7000"}, "non-empty list"),
    ],
    ids=repr,
)
def test_bad_redis_arguments_are_typed_errors(args, match):
    args = {"url": "redis://127.0.0.1:1/0", **args}
    with pytest.raises(InvalidArgument, match=match):
        RedisTier(args.pop("url"), **args)


def test_a_good_cluster_node_list_is_kept_as_host_and_int_port():
    tier = RedisTier(cluster_nodes=[("127.0.0.1", 7000), ["localhost", 7001]])
    assert tier.cluster_nodes == [("127.0.0.1", 7000), ("localhost", 7001)]
    tier.close()


@pytest.mark.parametrize("cooldown", [math.inf, "1", -0.5, None], ids=repr)
def test_a_breaker_cooldown_is_a_finite_number_of_seconds(cooldown):
    from paged_kv.tiers import CircuitBreaker

    with pytest.raises(InvalidArgument, match="cooldown_s"):
        CircuitBreaker(3, cooldown)


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


def test_the_redis_tier_asks_a_hung_server_once_per_call():
    """No retry behind the breaker's back: a server that accepts and never answers costs one
    connection and one timeout per call, and the call counts as an error."""
    import socket

    from paged_kv.tiers.redis_tier import RedisTier

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        tier = RedisTier(
            f"redis://127.0.0.1:{server.getsockname()[1]}/0",
            socket_timeout=0.1,
            connect_timeout=0.1,
            failure_threshold=10,
        )
        assert tier.contains([MUTANTS_SPACE.key(b"\x00" * 32)]) == [False]
        assert len(accepted) == 1
        assert tier.stats().operations == {("contains", "error"): 1}
        tier.close()
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def test_a_default_breaker_opens_on_the_third_failure_in_a_row():
    """Three failures in a row from a fresh breaker (the default threshold) open it."""
    from paged_kv.tiers import CircuitBreaker

    breaker = CircuitBreaker()
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.is_closed and breaker.allow()
    breaker.record_failure()
    assert not breaker.is_closed and not breaker.allow() and breaker.times_opened == 1


def test_a_breaker_of_threshold_one_opens_on_its_first_failure():
    from paged_kv.tiers import CircuitBreaker

    breaker = CircuitBreaker(1, 60.0)
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()


@pytest.mark.parametrize("clock", [5, None, "monotonic"], ids=repr)
def test_a_breaker_refuses_a_clock_that_is_not_a_function(clock):
    from paged_kv.tiers import CircuitBreaker

    with pytest.raises(InvalidArgument, match="clock is a function"):
        CircuitBreaker(3, 1.0, clock=clock)


def test_a_redis_server_that_exits_at_start_says_so_at_once():
    """A server that dies at start (here a bad option) fails start() with its exit code and
    log at once, not after waiting out the timeout for an answer."""
    from paged_kv.errors import PagedKVError

    require_redis_server()
    server = RedisServer(extra_args=("--no-such-option", "yes"))
    try:
        began = time.monotonic()
        with pytest.raises(PagedKVError, match=r"exited at start with code 1; see .*redis\.log"):
            server.start(timeout_s=5.0)
        assert time.monotonic() - began < 4.0
    finally:
        server.close()


def test_a_redis_server_never_started_can_be_killed_stopped_and_closed():
    """Cleanup code may stop a server whose start never ran: nothing raises, and close()
    still removes its directory."""
    require_redis_server()
    server = RedisServer()
    assert server.dir.is_dir()
    server.kill()
    server.stop()
    server.close()
    assert server.pid is None and not server.dir.exists()


def test_stop_and_kill_return_once_the_servers_process_has_exited(redis_server):
    import signal

    pid = redis_server.pid
    redis_server.stop()
    assert redis_server.process.returncode is not None and not redis_server.ping()
    assert redis_server.restart().pid != pid and redis_server.ping()
    redis_server.kill()
    assert redis_server.process.returncode == -signal.SIGKILL and not redis_server.ping()
    redis_server.close()
    assert not redis_server.dir.exists()


def test_a_local_redis_cluster_has_three_nodes_by_default():
    require_redis_server()
    cluster = RedisClusterNodes()
    try:
        assert len(cluster.nodes) == 3 and all(n.cluster for n in cluster.nodes)
        assert len({port for _, port in cluster.startup_nodes}) == 3
    finally:
        cluster.close()


def test_a_cluster_whose_start_fails_stops_the_nodes_it_had_started():
    from paged_kv.errors import PagedKVError

    require_redis_server()
    cluster = RedisClusterNodes(2)
    cluster.nodes[1].extra_args = ("--no-such-option", "yes")
    try:
        with pytest.raises(PagedKVError, match="exited at start"):
            cluster.start()
        first = cluster.nodes[0]
        assert first.process is not None and first.process.poll() is not None
        assert not first.ping() and not first.dir.exists()
    finally:
        cluster.close()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def mutant_keys(n: int) -> list[str]:
    return [MUTANTS_SPACE.key(bytes([i]) * 32) for i in range(n)]


def test_the_redis_tiers_usage_is_refreshed_once_a_full_second_has_passed(redis_server):
    clock = FakeClock()
    tier = RedisTier(redis_server.url, clock=clock)
    keys = mutant_keys(3)
    assert tier.usage() == (None, None)
    tier.put_many([(keys[0], b"a")])
    assert tier.usage()[0] == 1
    clock.now = 0.5
    tier.put_many([(keys[1], b"b")])
    assert tier.usage()[0] == 1, "refreshed at most once a second"
    clock.now = 1.0
    tier.put_many([(keys[2], b"c")])
    assert tier.usage()[0] == 3
    tier.close()


def test_the_redis_tiers_evictions_never_go_down_when_the_servers_count_resets(
    redis_factory,
):
    """Evictions are Redis's own, read from INFO: a server whose counter restarts from zero
    (CONFIG RESETSTAT, a restart) adds nothing, and the tier's count stays."""
    probe = redis_factory()
    baseline = int(raw_client(probe).info("memory")["used_memory"])
    server = redis_factory(maxmemory=baseline + 300_000, policy="allkeys-lru")
    clock = FakeClock()
    tier = RedisTier(server.url, clock=clock)
    keys = mutant_keys(60)
    tier.put_many([(keys[0], b"x" * 20_000)])
    for i in range(1, 60, 10):
        tier.put_many([(k, b"x" * 20_000) for k in keys[i : i + 10]])
    clock.now = 1.0
    tier.put_many([(keys[0], b"x" * 20_000)])
    evicted = tier.stats().evictions
    assert evicted > 0
    client = raw_client(server)
    client.flushall()
    client.config_resetstat()
    clock.now = 2.0
    tier.put_many([(keys[1], b"y")])
    assert tier.stats().evictions == evicted and tier.usage()[0] == 1
    tier.close()


def test_closing_the_redis_tier_closes_its_connections(redis_server):
    raw = raw_client(redis_server)
    tier = RedisTier(redis_server.url)
    tier.put_many([(mutant_keys(1)[0], b"a")])
    assert raw.info("clients")["connected_clients"] == 2
    tier.close()
    deadline = time.monotonic() + 5
    while raw.info("clients")["connected_clients"] > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert raw.info("clients")["connected_clients"] == 1


def test_a_cluster_tiers_ping_asks_every_primary_and_fails_while_one_is_down(redis_cluster):
    tier = RedisTier(cluster_nodes=redis_cluster.startup_nodes)
    assert tier.ping()
    names = sorted(f"{host}:{port}" for host, port in redis_cluster.startup_nodes)
    assert tier.endpoint_states() == dict.fromkeys(names, "closed")
    tier.close()
    redis_cluster.nodes[2].kill()
    fresh = RedisTier(cluster_nodes=redis_cluster.startup_nodes)
    assert not fresh.ping()
    fresh.close()


# -- values bounded before they are fetched; whole calls bounded by a deadline -------------


def test_planted_oversized_values_are_refused_after_reading_one_block_of_each(redis_server):
    """Four 32 MiB values planted under a prompt's keys: a lookup reads at most a block and
    a byte of each (GETRANGE), counts them as corrupt ("size"), deletes them, and its peak
    of traced memory stays under twice one value; serving the prompt then recomputes them."""
    prompt = system_prompt(96) + question("Fees?")
    store = TieredStore([RedisTier(redis_server.url)])
    serve(store, [prompt])
    assert store.flush()
    keys = prompt_keys(prompt)[: len(prompt) // BLOCK]
    client = raw_client(redis_server)
    planted = keys[1:5]
    value = bytes(32 << 20)
    for key in planted:
        client.set(key, value)
    tier = store.tier("remote")
    limit = space().fingerprint.max_blob_bytes
    tracemalloc.start()
    try:
        got = tier.get_many(keys[:5], max_bytes=limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got[0] is not None and got[1:] == [None] * 4
    assert peak < 2 * len(value), f"{peak} bytes traced for four {len(value)}-byte values"
    assert peak < 5 * 2 * (limit + 1), "at most a block and a byte of each value, read once"
    corrupt = "paged_kv_tier_corrupt_blocks_total"
    assert store.metrics.value(corrupt, tier="remote", reason="size") == 4
    assert not any(client.exists(k) for k in planted), "the planted values are deleted"
    tokens, _ = serve(store, [prompt])
    assert tokens == reference_tokens([prompt], 8)
    assert store.metrics.value(corrupt, tier="remote", reason="size") == 4
    store.close()


class TricklingServer:
    """A TCP server on 127.0.0.1 whose every reply never ends: whatever it is sent, it
    answers with a bulk string header promising a megabyte, then one byte every 0.1 s for at
    most `lasts_s` seconds. Started and stopped by the test that uses it."""

    def __init__(self, lasts_s: float = 10.0) -> None:
        self.lasts_s = lasts_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._trickle, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _trickle(self, conn: socket.socket) -> None:
        ends = time.monotonic() + self.lasts_s
        with conn, contextlib.suppress(OSError):
            conn.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                conn.recv(1 << 16)  # the first command, whatever it is
            conn.sendall(b"$1000000\r\n")
            while not self.stopped.wait(0.1) and time.monotonic() < ends:
                conn.sendall(b"x")

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def trickling(request):
    server = TricklingServer()
    request.addfinalizer(server.close)
    return server


@pytest.mark.parametrize("call", ["count_leading", "get_many", "put_many", "ping", "load_run"])
def test_a_server_trickling_a_byte_every_tenth_of_a_second_costs_one_deadline(trickling, call):
    """`socket_timeout` bounded each receive, so a byte every 0.1 s held a call for as long
    as the server liked; now the whole call ends within its stall budget (plus 0.5 s of
    scheduling slack), is counted as a failure, and opens a threshold-1 breaker."""
    tier = RedisTier(
        f"redis://127.0.0.1:{trickling.port}/0", socket_timeout=0.25, connect_timeout=0.25,
        failure_threshold=1, cooldown_s=60,
    )  # fmt: skip
    store = TieredStore([tier], metrics=None)
    hashes = block_hashes(system_prompt(64), BLOCK)
    keys = space().keys(hashes)
    calls = {
        "count_leading": lambda: tier.count_leading(keys),
        "get_many": lambda: tier.get_many(keys),
        "put_many": lambda: tier.put_many([(k, b"v") for k in keys]),
        "ping": tier.ping,
        "load_run": lambda: store.load_run(space(), hashes),
    }
    began = time.monotonic()
    result = calls[call]()
    took = time.monotonic() - began
    assert took <= tier.stall_budget_s(0) + 0.5, f"{call} took {took:.2f} s"
    assert result in (0, [None] * len(keys), [False] * len(keys), False, [])
    assert not tier.is_up, "the call failed and was counted"
    store.close(timeout_s=1.0)


def test_a_deadline_cut_leaves_no_half_read_reply_behind(redis_server):
    """A call cut off by its deadline drops its connection: the next call on a healthy
    server reads its own reply, not the rest of the old one."""
    tier = RedisTier(redis_server.url, socket_timeout=0.2, connect_timeout=0.2)
    key = f"t:{'a' * 32}:{0:064x}"
    assert tier.put_many([(key, b"first")]) == [True]
    redis_server.pause()
    try:
        assert tier.get_many([key]) == [None]
    finally:
        redis_server.resume()
    deadline = time.monotonic() + 5
    while tier.get_many([key]) != [b"first"]:
        assert time.monotonic() < deadline, "the tier never read its own reply again"
        time.sleep(0.05)
    tier.close()


def test_every_cluster_nodes_client_keeps_the_calls_deadline(redis_cluster):
    """redis-py hands a cluster's node clients a connection class only when the cluster is
    made from a URL: the tier does so, and every node's connections are deadline-bound."""
    plain, _ = _deadline_connections()
    tier = RedisTier(cluster_nodes=redis_cluster.startup_nodes)
    assert tier.ping()
    clients = [e.client for e in tier._endpoints.values()]
    assert len(clients) == 3
    assert all(c.connection_pool.connection_class is plain for c in clients)
    tier.close()
