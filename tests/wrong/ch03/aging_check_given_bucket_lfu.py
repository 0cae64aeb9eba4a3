# expect: raised from check_aging(BucketLFU)
