# expect: not_paged from check_paged_decode(wrong)
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    out, group = torch.zeros_like(q), q.shape[1] // k_cache.shape[2]
    for b, length in enumerate(seq_lens.tolist()):
        blocks = block_tables[b, : -(-length // k_cache.shape[1])].long()
        keys, values = (c[blocks].flatten(0, 1)[:length].float() for c in (k_cache, v_cache))
        for h in range(q.shape[1] * bool(length)):  # the whole sequence at once
            scores = keys[:, h // group] @ q[b, h].float() / math.sqrt(q.shape[-1])
            out[b, h] = online_softmax([(scores, values[:, h // group])])[0].to(q.dtype)
    return out
