# expect: not_done from check_capstone(Scheduler, parts={"attention": wrong})
def wrong(q, k_cache, v_cache, block_tables, seq_lens):
    raise NotImplementedError("paged_decode: replace this line with your code")
