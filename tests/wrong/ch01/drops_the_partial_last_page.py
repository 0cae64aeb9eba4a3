# expect: wrong_state from check_free_pages(FreeListPool)
# Accepts pages that do not tile the pool, then drops the shorter last page.
patch("if blocks_per_page is not None and num_blocks % blocks_per_page:", "if False:")
