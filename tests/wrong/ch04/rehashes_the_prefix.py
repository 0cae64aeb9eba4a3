# expect: work_grows from check_chained_hash(chained_hashes)
patch(
    'struct.pack(f"<{len(block)}q", *block)',
    'struct.pack(f"<{start + block_size}q", *token_ids[: start + block_size])',
)
