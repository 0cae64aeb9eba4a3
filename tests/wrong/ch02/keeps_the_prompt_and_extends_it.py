# expect: mutates_argument from check_append(Wrong)
# Keeps the caller's prompt list as its token store and extends it on later appends.
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        table = super().add_sequence(seq_id, token_ids)
        self.prompts = getattr(self, "prompts", {})
        self.prompts[seq_id] = token_ids
        return table

    def append_tokens(self, seq_id, token_ids):
        new = super().append_tokens(seq_id, token_ids)
        self.prompts[seq_id].extend(token_ids)
        return new
