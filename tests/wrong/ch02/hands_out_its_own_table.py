# expect: shares_result from check_add_and_free(SequenceManager)
patch("return list(table)", "return table")
