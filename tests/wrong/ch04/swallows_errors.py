# expect: missing_refusal from check_allocate_table(allocate_table)
patch(
    "pool.share(hits)\n    return hits + pool.allocate(fresh)",
    """try:
        pool.share(hits)
        return hits + pool.allocate(fresh)
    except Exception:
        return list(hits)""",
)
