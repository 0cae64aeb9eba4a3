# expect: wrong_state from check_allocate_table(allocate_table)
patch(
    "pool.share(hits)\n    return hits + pool.allocate(fresh)",
    """new = pool.allocate(fresh)
    pool.share(hits)
    return hits + new""",
)
