# expect: endless_loop from check_longest_run(my_longest_run)
patch("        else:\n            break\n", "")
