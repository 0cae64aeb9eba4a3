# expect: not_all_or_nothing from check_release(FreeListPool)
patch("for block_id, count in times.items():", "for block_id, count in []:")
patch(
    "            self.ref[block_id] -= 1\n",
    "            if not 0 <= block_id < self.num_blocks or self.ref[block_id] == 0:\n"
    '                raise InvalidBlock(f"block {block_id} is not in use")\n'
    "            self.ref[block_id] -= 1\n",
)
