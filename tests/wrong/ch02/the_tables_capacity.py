# expect: wrong_result from check_manager_slots(SequenceManager)
# The length taken as the table's capacity: end=None reads past the last token.
patch(
    "length = self.num_tokens(seq_id)", "length = len(self.block_table(seq_id)) * self.block_size"
)
