# expect: wrong_result from check_parts_so_far(SequenceManager, BlockPool)
patch(
    "table[t // size] * size + t % size",
    "table[t % size if t % size < len(table) else 0] * size + t // size",
)
