# expect: calls_library from check_paged_decode(wrong)
from paged_kv.attention import paged_decode as library_decode


def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    return library_decode(q, k_cache, v_cache, block_tables, seq_lens)
