# expect: missing_refusal from check_add_and_free(SequenceManager)
patch("del self.tables[seq_id], self.lengths[seq_id]", "self.tables[seq_id] = []")
