# expect: wrong_result from check_prefix_parts(chained_hashes, cached_prefix, fresh_blocks_first)
def fresh_blocks_first(pool, hits, num_blocks):
    table = allocate_table(pool, hits, num_blocks)
    return table[len(hits) :] + hits
