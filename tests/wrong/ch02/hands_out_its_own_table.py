# expect: shares_result from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        super().add_sequence(seq_id, token_ids)
        return self.tables[seq_id]
