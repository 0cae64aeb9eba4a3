# expect: missing_scale from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    return paged_decode(q * math.sqrt(q.shape[-1]), k_cache, v_cache, block_tables, seq_lens)
