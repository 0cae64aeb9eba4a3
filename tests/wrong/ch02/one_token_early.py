# expect: wrong_result from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self.num_tokens(seq_id)
        new = []
        for _ in token_ids:
            if (self.lengths[seq_id] + 1) % self.block_size == 0:
                new += self.pool.allocate(1)
            self.lengths[seq_id] += 1
        self.tables[seq_id] += new
        return new
