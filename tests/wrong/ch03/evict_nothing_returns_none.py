# expect: missing_refusal from check_lfu(BucketLFU)
patch('raise InvalidBlock(f"{self.name}: no evictable block")', "return None")
