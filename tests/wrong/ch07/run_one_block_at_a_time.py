# expect: needless_questions from check_longest_run(my_longest_run)
patch("tier.count_leading(rest)", "tier.count_leading(rest[:1])")
