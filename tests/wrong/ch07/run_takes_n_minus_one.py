# expect: endless_loop from check_longest_run(my_longest_run)
patch("sources += [tier] * n", "sources += [tier] * (n - 1)")
