# expect: raised from check_allocate_table(allocate_table)
patch("if fresh > available:", "if fresh >= available and fresh:")
