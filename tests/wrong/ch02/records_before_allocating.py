# expect: missing_refusal from check_add_and_free(SequenceManager)
patch(
    "        table = self.pool.allocate(",
    "        self.tables[seq_id], self.lengths[seq_id] = [], len(token_ids)\n"
    "        table = self.pool.allocate(",
)
