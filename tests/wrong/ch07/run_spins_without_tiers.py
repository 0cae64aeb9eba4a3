# expect: endless_loop from check_longest_run(my_longest_run)
patch(
    "        else:\n            break",
    """        else:
            if tiers:  # no tier has it (but with no tiers at all, try again)
                break""",
)
