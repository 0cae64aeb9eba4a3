# expect: mutates_argument from check_append(SequenceManager)
patch("        return new_blocks", "        token_ids.clear()\n        return new_blocks")
