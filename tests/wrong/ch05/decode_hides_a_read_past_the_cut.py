# expect: wrong_result from check_paged_decode(paged_decode)
patch("n = min(block_size, length - i * block_size)", "n = block_size")
patch(
    "keys @ query, v_cache[block, :n, h // group].float()",
    "(keys @ query).nan_to_num(-math.inf), v_cache[block, :n, h // group].float().nan_to_num()",
)
