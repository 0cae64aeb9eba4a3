# expect: wrong_error from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        total = self.num_tokens(seq_id) + len(token_ids)
        grow = -(-total // self.block_size) > len(self.tables[seq_id])
        new = self.pool.allocate(1) if grow else []
        self.tables[seq_id] += new
        self.lengths[seq_id] = total
        return new
