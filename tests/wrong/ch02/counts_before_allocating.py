# expect: not_all_or_nothing from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        self.num_tokens(seq_id)
        self.lengths[seq_id] += len(token_ids)
        need = -(-self.lengths[seq_id] // self.block_size) - len(self.tables[seq_id])
        new = self.pool.allocate(max(0, need))
        self.tables[seq_id] += new
        return new
