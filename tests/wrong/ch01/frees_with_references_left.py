# expect: missing_refusal from check_release(FreeListPool)
# Drops every reference of a block released once, and so accepts [b, b] on a block held once.
# (Was also release_drops_every_reference, the same mistake on BlockPool.)
patch("if count > self.ref[block_id]:", "if self.ref[block_id] == 0:")
patch("self.ref[block_id] -= 1", "self.ref[block_id] = 0")
