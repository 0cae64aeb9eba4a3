# expect: wrong_dtype from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    return paged_decode(q.float(), k_cache.float(), v_cache.float(), block_tables, seq_lens)
