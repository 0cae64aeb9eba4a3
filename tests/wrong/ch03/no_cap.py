# expect: raised from check_lfu(BucketLFU)
patch("bucket = min(count, MAX_BUCKET)", "bucket = count")
