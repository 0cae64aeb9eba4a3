# expect: wrong_order from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def free_sequence(self, seq_id):
        self.pool.release(self.block_table(seq_id))
        del self.tables[seq_id], self.lengths[seq_id]
