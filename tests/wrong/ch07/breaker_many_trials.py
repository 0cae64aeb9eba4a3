# expect: wrong_result from check_circuit_breaker(MyBreaker)
patch("return False", 'return self.state == "half-open"')  # a trial call for every allow()
