# expect: mutates_argument from check_add_and_free(SequenceManager)
patch("        return list(table)", "        token_ids.clear()\n        return list(table)")
