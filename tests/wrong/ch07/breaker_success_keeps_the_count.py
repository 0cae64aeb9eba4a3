# expect: wrong_state from check_circuit_breaker(MyBreaker)
patch(
    '"closed"\n        self.failures = 0\n        ###',
    '"closed"  # the failures in a row are kept\n        ###',
)
