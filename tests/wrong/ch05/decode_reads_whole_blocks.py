# expect: not_finite from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    size = k_cache.shape[1]
    return paged_decode(q, k_cache, v_cache, block_tables, (seq_lens + size - 1) // size * size)
