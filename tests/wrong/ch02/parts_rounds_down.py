# expect: raised from check_parts_so_far(SequenceManager, BlockPool)
patch("-(-len(token_ids) // self.block_size)", "len(token_ids) // self.block_size")
