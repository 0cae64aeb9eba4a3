# expect: wrong_state from check_free_pages(Wrong)
# Accepts pages that do not tile the pool, then drops the shorter last page.
class Wrong(FreeListPool):
    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        self.num_blocks, self.block_size, self.blocks_per_page = (
            num_blocks,
            block_size,
            blocks_per_page,
        )
        self.ref = [0] * num_blocks
        self.free_ids = list(range(num_blocks - 1, -1, -1))
