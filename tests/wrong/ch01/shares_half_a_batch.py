# expect: not_all_or_nothing from check_release(FreeListPool)
# Validates and counts in one loop: a bad id late in the batch leaves the earlier ones shared.
patch('before sharing")\n        for block_id in block_ids:\n', 'before sharing")\n')
