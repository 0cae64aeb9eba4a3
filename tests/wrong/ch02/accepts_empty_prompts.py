# expect: missing_refusal from check_add_and_free(SequenceManager)
patch("if len(token_ids) == 0:", "if False:")
