# expect: wrong_state
# check: check_aging(NotAging)
class NotAging(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
