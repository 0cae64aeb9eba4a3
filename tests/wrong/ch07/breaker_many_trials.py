# expect: wrong_result from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def allow(self):
        if self.state == "open" and self.clock() - self.opened_at >= self.cooldown_s:
            self.state = "half-open"
        return self.state != "open"
