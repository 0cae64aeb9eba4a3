# expect: wrong_error from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def block_table(self, seq_id):
        return list(self.tables[seq_id])
