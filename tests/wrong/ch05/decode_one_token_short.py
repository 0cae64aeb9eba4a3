# expect: wrong_result from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    return paged_decode(q, k_cache, v_cache, block_tables, (seq_lens - 1).clamp(min=1))
