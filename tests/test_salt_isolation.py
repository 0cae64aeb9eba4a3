"""Tenants share cached blocks only within one namespace (salt and extra keys), whichever
prefix index the manager uses: the hash chain mixes the namespace into every hash, the radix
tree keeps one tree per namespace. A namespace that stopped separating would hand one
tenant's KV (and so, through timing, its prompts) to another."""

import pytest

from paged_kv import KVCacheManager

PROMPT = list(range(9))  # two full blocks of 4, then the last token


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_only_the_same_salt_and_extra_keys_share_blocks(index):
    m = KVCacheManager(64, 4, prefix_index=index)
    namespaces = [
        {"salt": "t1"},
        {"salt": "t2"},
        {"salt": b"t1"},  # bytes are not the str of the same letters
        {},
        {"extra_keys": ("lora-a",)},
        {"extra_keys": ("lora-b",)},
        {"salt": "t1", "extra_keys": ("lora-a",)},
    ]
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("first", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("first", i)) == 0, namespace  # nobody else's blocks
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("again", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("again", i)) == 8, namespace  # its own, every time
        assert m.block_table(("again", i))[:2] == m.block_table(("first", i))[:2]
    tables = {tuple(m.block_table(("first", i))[:2]) for i in range(len(namespaces))}
    assert len(tables) == len(namespaces)
