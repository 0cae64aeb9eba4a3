"""paged_kv.tiers.connector: between the manager and the tiered store."""

from __future__ import annotations

from test_tiers_base import TOY_FP
from test_tiers_codec import toy_payloads

from paged_kv.tiers import HostTier, TieredStore

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


def _connector(store, staging_blocks):
    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.tiers.connector import KVConnector

    manager = KVCacheManager(num_blocks=16, block_size=TOY_FP.block_size)
    return KVConnector(store, manager, None, TOY_FP, staging_blocks=staging_blocks)


def test_the_connector_serves_a_priced_request_from_its_staged_blocks():
    """Blocks verified while pricing a request stay staged until it is admitted: pricing it
    again after the tier lost them still finds them."""
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=8)
    seq = TokenSequence(list(range(7)))  # 3 full blocks before the last token
    hashes = seq.full_block_hashes(TOY_FP.block_size)
    store.save(store.key_space(TOY_FP), hashes[:3], toy_payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    host.delete(store.key_space(TOY_FP).keys(hashes[:3]))
    assert connector.loadable_tokens(seq, 0) == 6


def test_the_connector_stages_at_most_staging_blocks():
    """Staging is bounded: the oldest staged blocks go first, and a request whose first block
    left staging (and the tier) loads nothing."""
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=2)
    seq = TokenSequence(list(range(7)))
    hashes = seq.full_block_hashes(TOY_FP.block_size)
    store.save(store.key_space(TOY_FP), hashes[:3], toy_payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    host.delete(store.key_space(TOY_FP).keys(hashes[:3]))
    assert connector.loadable_tokens(seq, 0) == 0
