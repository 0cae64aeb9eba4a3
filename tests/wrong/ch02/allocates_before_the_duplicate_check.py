# expect: not_all_or_nothing from check_add_and_free(SequenceManager)
# Takes the prompt's blocks, then refuses a duplicate id.
table = "        table = self.pool.allocate(-(-len(token_ids) // self.block_size))\n"
patch(table + "        self.tables", "        self.tables")
patch("        if seq_id in self.tables:\n", table + "        if seq_id in self.tables:\n")
