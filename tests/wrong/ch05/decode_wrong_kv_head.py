# expect: wrong_kv_head from check_paged_decode(paged_decode)
patch("k_cache[block, :n, h // group]", "k_cache[block, :n, h % kv_heads]")
patch("v_cache[block, :n, h // group]", "v_cache[block, :n, h % kv_heads]")
