# expect: raised from check_parts_so_far(Wrong, BlockPool)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = self.pool.allocate(len(token_ids) // self.block_size)
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)
