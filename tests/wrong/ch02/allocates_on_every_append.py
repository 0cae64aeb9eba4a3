# expect: wrong_result from check_append(SequenceManager)
patch("max(0, -(-total // self.block_size) - len(table))", "1 if token_ids else 0")
