# expect: missing_refusal from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def free_sequence(self, seq_id):
        self.pool.release(self.block_table(seq_id)[::-1])
        self.tables[seq_id] = []
