# expect: mutates_argument from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        new = super().append_tokens(seq_id, token_ids)
        token_ids.clear()
        return new
