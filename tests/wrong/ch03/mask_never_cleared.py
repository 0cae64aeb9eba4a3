# expect: raised from check_lfu(BucketLFU)
patch("self.nonempty &= ~(1 << bucket)", "pass")
