# expect: not_finite from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    flat = torch.arange(k_cache.shape[0])[None].expand(q.shape[0], -1)
    return paged_decode(q, k_cache, v_cache, flat, seq_lens)
