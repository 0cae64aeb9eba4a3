# expect: wrong_result from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self.num_tokens(seq_id)
        new = self.pool.allocate(1) if token_ids else []
        self.tables[seq_id] += new
        self.lengths[seq_id] += len(token_ids)
        return new
