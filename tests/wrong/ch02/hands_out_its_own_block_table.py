# expect: shares_result from check_append(Wrong)
class Wrong(SequenceManager):
    def block_table(self, seq_id):
        if seq_id not in self.tables:
            raise UnknownSequence(seq_id)
        return self.tables[seq_id]
