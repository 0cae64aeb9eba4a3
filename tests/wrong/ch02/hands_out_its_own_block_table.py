# expect: shares_result
# check: check_append(Wrong)
class Wrong(SequenceManager):
    def block_table(self, seq_id):
        if seq_id not in self.tables:
            raise UnknownSequence(seq_id)
        return self.tables[seq_id]
