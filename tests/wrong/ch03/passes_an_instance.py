# expect: bad_signature from check_lfu(BucketLFU())
