# expect: wrong_state from check_free_pages(FreeListPool)
patch("(p + 1) * per_page])", "(p + 1) * per_page - 1])")
