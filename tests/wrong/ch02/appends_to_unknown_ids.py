# expect: missing_refusal from check_append(Wrong)
class Wrong(SequenceManager):
    def append_tokens(self, seq_id, token_ids):
        if seq_id not in self.tables:
            return []
        return super().append_tokens(seq_id, token_ids)
