# expect: raised
# check: check_aging(BucketLFU)
