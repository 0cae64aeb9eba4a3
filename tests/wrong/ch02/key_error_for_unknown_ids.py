# expect: wrong_error from check_add_and_free(SequenceManager)
patch("if seq_id not in self.tables:", "if False:")
