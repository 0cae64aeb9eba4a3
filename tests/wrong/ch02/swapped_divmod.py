# expect: wrong_result from check_manager_slots(Wrong)
class Wrong(SequenceManager):
    def slot_mapping(self, seq_id, start=0, end=None):
        length = self.num_tokens(seq_id)
        table, size = self.block_table(seq_id), self.block_size
        end = length if end is None else end
        if not 0 <= start <= end <= length:
            raise InvalidArgument("range")
        return [table[t % len(table)] * size + t // len(table) for t in range(start, end)]
