# expect: calls_library from check_paged_decode(paged_decode)
patch(
    "    batch, q_heads, dim = q.shape",
    "    return paged_kv.attention.paged_decode(q, k_cache, v_cache, block_tables, seq_lens)",
)
