# expect: wrong_state
# check: check_aging(ForgetKeepsTheLife)
class ForgetKeepsTheLife(WindowLFU):
    def forget(self, block):
        BucketLFU.forget(self, block)
