# expect: wrong_result from check_longest_run(my_longest_run)
patch("for tier in tiers:", "for tier in tiers[:1]:")
