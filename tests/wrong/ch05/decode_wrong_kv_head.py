# expect: wrong_kv_head from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    order = torch.arange(q.shape[1]).reshape(-1, k_cache.shape[2]).T.reshape(-1)  # h % kv_heads
    out = paged_decode(q[:, order], k_cache, v_cache, block_tables, seq_lens)
    return out[:, order.argsort()]
