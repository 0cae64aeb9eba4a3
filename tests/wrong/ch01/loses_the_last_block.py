# expect: wrong_state from check_release(FreeListPool)
# Forgets to put the pool's last block back: only a random trial reaches it.
patch(
    "                self.free_ids.append(block_id)",
    "                if block_id != self.num_blocks - 1:\n"
    "                    self.free_ids.append(block_id)",
)
