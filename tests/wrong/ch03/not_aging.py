# expect: wrong_state from check_aging(NotAging)
class NotAging(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
