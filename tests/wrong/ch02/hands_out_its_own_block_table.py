# expect: shares_result from check_append(SequenceManager)
patch("return list(self.tables[seq_id])", "return self.tables[seq_id]")
