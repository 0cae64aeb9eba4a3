# expect: mutates_argument from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = super().add_sequence(seq_id, token_ids)
        token_ids.clear()
        return table
