# expect: wrong_error from check_append(SequenceManager)
patch(
    "max(0, -(-total // self.block_size) - len(table))",
    "min(1, -(-total // self.block_size) - len(table))",
)
