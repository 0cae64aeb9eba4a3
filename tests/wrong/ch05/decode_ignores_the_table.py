# expect: not_finite from check_paged_decode(paged_decode)
patch(
    "blocks = block_tables[b, : -(-length // block_size)].tolist()",
    "blocks = list(range(-(-length // block_size)))",
)
