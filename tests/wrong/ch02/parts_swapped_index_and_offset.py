# expect: wrong_result from check_parts_so_far(Wrong, BlockPool)
class Wrong(SequenceManager):
    def slot_mapping(self, seq_id, start=0, end=None):
        length = self.num_tokens(seq_id)
        end = length if end is None else end
        table, size = self.block_table(seq_id), self.block_size
        return [
            table[t % size if t % size < len(table) else 0] * size + t // size
            for t in range(start, end)
        ]
