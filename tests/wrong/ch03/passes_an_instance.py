# expect: bad_signature
# check: check_lfu(BucketLFU())
