# expect: wrong_error from check_circuit_breaker(MyBreaker)
patch("raise InvalidArgument(", "raise ValueError(")
