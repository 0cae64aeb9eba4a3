# expect: wrong_state from check_aging(ForgetKeepsTheLife)
class ForgetKeepsTheLife(WindowLFU):
    def forget(self, block):
        BucketLFU.forget(self, block)
