# expect: wrong_state from check_free_pages(FreeListPool)
# A page with any free block counted as free.
patch("if not any(", "if 0 in (")
