# expect: wrong_result from check_circuit_breaker(MyBreaker)
patch('if self.state == "open" and', "if False and")
