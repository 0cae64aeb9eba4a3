# expect: wrong_result from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        table = self.pool.allocate(len(token_ids) // self.block_size)
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)
