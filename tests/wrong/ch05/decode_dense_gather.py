# expect: not_paged
# check: check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // kv_heads
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        length = int(seq_lens[b])
        if length == 0:
            continue
        blocks = block_tables[b, : -(-length // block_size)].long()
        keys = k_cache[blocks].flatten(0, 1)[:length].float()  # the whole sequence at once
        values = v_cache[blocks].flatten(0, 1)[:length].float()
        for h in range(q.shape[1]):
            scores = keys[:, h // group] @ q[b, h].float() / math.sqrt(q.shape[-1])
            out[b, h] = online_softmax(iter([(scores, values[:, h // group])]))[0].to(q.dtype)
    return out
