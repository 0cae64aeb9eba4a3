# expect: not_all_or_nothing from check_append(SequenceManager)
patch(
    "        new_blocks = self.pool",
    "        self.lengths[seq_id] = total\n        new_blocks = self.pool",
)
