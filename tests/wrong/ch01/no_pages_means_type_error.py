# expect: raised from check_free_pages(FreeListPool)
patch("        if per_page is None:\n            return []\n", "")
