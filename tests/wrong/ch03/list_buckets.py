# expect: work_grows from check_lfu(BucketLFU)
# Buckets as lists: `remove` searches the bucket, which grows with the cache.
patch("OrderedDict() for", "list() for")
patch("self.buckets[bucket][block] = None", "self.buckets[bucket].append(block)")
patch("del self.buckets[bucket][block]", "self.buckets[bucket].remove(block)")
