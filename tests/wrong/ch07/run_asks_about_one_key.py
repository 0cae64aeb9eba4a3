# expect: wrong_result from check_longest_run(my_longest_run)
patch("tier.count_leading(rest)", "tier.count_leading(rest[0])")  # a key, not a list of keys
