# expect: wrong_result from check_longest_run(my_longest_run)
patch(
    "        else:\n            break",
    """        else:  # no tier has it: go on without it
            keys = keys[: len(sources)] + keys[len(sources) + 1 :]""",
)
