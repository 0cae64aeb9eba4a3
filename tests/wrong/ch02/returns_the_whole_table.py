# expect: wrong_result from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        super().append_tokens(seq_id, token_ids)
        return self.block_table(seq_id)
