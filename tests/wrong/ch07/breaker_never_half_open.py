# expect: wrong_result
# check: check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def allow(self):
        return self.state == "closed"
