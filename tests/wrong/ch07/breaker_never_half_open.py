# expect: wrong_result from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def allow(self):
        return self.state == "closed"
