# expect: not_all_or_nothing from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = self.pool.allocate(-(-len(token_ids) // self.block_size)) if token_ids else []
        if seq_id in self.tables:
            raise DuplicateSequence(seq_id)
        if not token_ids:
            raise InvalidArgument("empty")
        self.tables[seq_id], self.lengths[seq_id] = table, len(token_ids)
        return list(table)
