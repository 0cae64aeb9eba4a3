# expect: wrong_result from check_release(FreeListPool)
patch("        return freed\n", "")
