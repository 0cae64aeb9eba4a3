# expect: wrong_result from check_append(SequenceManager)
patch("        return new_blocks", "        return list(table)")
