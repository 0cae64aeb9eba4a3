"""paged_kv.tiers.connector: between the manager and the tiered store."""

from __future__ import annotations

import pytest
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


@pytest.mark.parametrize(("staging_blocks", "still_loadable"), [(8, 6), (3, 6), (2, 0)])
def test_the_connector_serves_a_priced_request_from_at_most_staging_blocks(
    staging_blocks, still_loadable
):
    """Blocks verified while pricing a request stay staged until it is admitted: pricing it
    again after the tier lost them still finds them. Staging is bounded: a request of exactly
    `staging_blocks` blocks stays wholly staged; past that the oldest staged blocks go first,
    and a request whose first block left staging (and the tier) loads nothing."""
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=staging_blocks)
    seq = TokenSequence(list(range(7)))  # 3 full blocks before the last token
    hashes = seq.full_block_hashes(TOY_FP.block_size)
    store.save(store.key_space(TOY_FP), hashes[:3], toy_payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    host.delete(store.key_space(TOY_FP).keys(hashes[:3]))
    assert connector.loadable_tokens(seq, 0) == still_loadable


def test_the_connector_lets_go_of_staged_blocks_once_it_has_loaded_them():
    """Admission copies the staged blocks into the request's blocks and drops them from
    staging: a later request for the same prefix reads the tier again (here, a miss)."""
    from types import SimpleNamespace

    import torch

    from paged_kv.attention.storage import KVStorage
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=8)
    fp = TOY_FP
    connector.kv = KVStorage(fp.num_layers, 16, fp.block_size, fp.num_kv_heads, fp.head_dim)
    seq = TokenSequence(list(range(7)))
    hashes = seq.full_block_hashes(fp.block_size)
    store.save(store.key_space(fp), hashes[:3], toy_payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    table = connector.manager.add_sequence("a", seq, num_loaded_tokens=6)
    request = SimpleNamespace(request_id="a", sequence=seq)
    chunk = SimpleNamespace(request=request, start=6, num_tokens=1, admitted=True)
    connector.load_admitted([chunk])
    for i in range(3):
        assert torch.equal(connector.kv.k[0][table[i]], torch.full((2, 1, 2), float(i)))
    assert connector.block_sources["a"] == ["host"] * 3 + ["computed"]
    host.delete(store.key_space(fp).keys(hashes[:3]))
    assert connector.loadable_tokens(TokenSequence(list(range(7))), 0) == 0


def test_block_sources_keep_the_last_keep_sources_requests_admitted():
    """A long-running connector's per-request records stay bounded: hundreds of admissions
    leave the newest `keep_sources`, and a readmitted request's record counts as newest."""
    from types import SimpleNamespace

    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.cache.sequence import TokenSequence
    from paged_kv.tiers.connector import KVConnector

    store = TieredStore([HostTier(1 << 20)], metrics=None)
    manager = KVCacheManager(num_blocks=16, block_size=TOY_FP.block_size)
    connector = KVConnector(store, manager, None, TOY_FP, keep_sources=3)

    def admit(request_id, start):
        request = SimpleNamespace(request_id=request_id, sequence=TokenSequence([1, 2, 3]))
        chunk = SimpleNamespace(request=request, start=start, num_tokens=3 - start, admitted=True)
        connector.load_admitted([chunk])

    for i in range(300):
        admit(i, 0)
        assert len(connector.block_sources) == min(i + 1, 3)
    admit(297, 2)  # readmitted after a preemption, with its first block a device hit
    assert list(connector.block_sources) == [298, 299, 297]
    assert connector.block_sources[297] == ["device", "computed"]
    with pytest.raises(ValueError, match="keep_sources"):
        KVConnector(store, manager, None, TOY_FP, keep_sources=0)
