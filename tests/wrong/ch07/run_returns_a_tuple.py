# expect: wrong_result from check_longest_run(my_longest_run)
patch("return sources", "return tuple(sources)")
