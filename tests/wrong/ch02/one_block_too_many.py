# expect: wrong_result from check_add_and_free(SequenceManager)
patch("-(-len(token_ids) // self.block_size)", "len(token_ids) // self.block_size + 1")
