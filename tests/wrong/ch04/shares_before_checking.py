# expect: not_all_or_nothing from check_allocate_table(allocate_table)
patch("if fresh > available:", "if False:")
