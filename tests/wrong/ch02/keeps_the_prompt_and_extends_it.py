# expect: mutates_argument from check_append(SequenceManager)
# Keeps the caller's prompt list as the sequence's tokens and extends it on later appends.
patch("self.lengths = {}", "self.lengths, self.tokens = {}, {}")
patch(
    "self.lengths[seq_id] = len(token_ids)",
    "self.tokens[seq_id] = token_ids\n        self.lengths[seq_id] = len(token_ids)",
)
patch(
    "table.extend(new_blocks)",
    "table.extend(new_blocks)\n        self.tokens[seq_id].extend(token_ids)",
)
