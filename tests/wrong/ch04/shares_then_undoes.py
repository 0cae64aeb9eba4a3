# expect: not_all_or_nothing from check_allocate_table(allocate_table)
patch("if fresh > available:", "if False:")
patch(
    "return hits + pool.allocate(fresh)",
    """try:
        return hits + pool.allocate(fresh)
    except OutOfBlocks:
        pool.release(hits)
        raise""",
)
