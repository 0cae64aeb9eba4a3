# expect: part_at_fault from check_capstone(Scheduler, parts={"attention": wrong})
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    from paged_kv.attention import reference_decode

    return reference_decode(q, k_cache, v_cache, block_tables, seq_lens.clamp(max=4))
