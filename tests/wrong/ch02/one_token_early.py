# expect: wrong_result from check_append(SequenceManager)
patch("-(-total // self.block_size)", "-(-(total + 1) // self.block_size)")
