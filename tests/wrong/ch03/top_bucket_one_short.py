# expect: wrong_result from check_lfu(BucketLFU)
# Counts 254 and 255 share a bucket: the top bucket is MAX_BUCKET - 1.
patch("bucket = min(count, MAX_BUCKET)", "bucket = min(count, MAX_BUCKET - 1)")
