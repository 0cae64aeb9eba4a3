# expect: wrong_result from check_circuit_breaker(MyBreaker)
patch("self.clock() - self.opened_at", "time.monotonic() - self.opened_at")
