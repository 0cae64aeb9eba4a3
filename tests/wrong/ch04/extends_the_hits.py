# expect: mutates_argument from check_allocate_table(extends_the_hits)
def extends_the_hits(pool, hits, num_blocks):
    table = allocate_table(pool, list(hits), num_blocks)
    hits.extend(table[len(hits) :])
    return hits
