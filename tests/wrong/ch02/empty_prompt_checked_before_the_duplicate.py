# expect: wrong_error from check_add_and_free(Wrong)
class Wrong(SequenceManager):
    def add_sequence(self, seq_id, token_ids):
        if not len(token_ids):
            raise InvalidArgument("empty prompt")
        return super().add_sequence(seq_id, token_ids)
