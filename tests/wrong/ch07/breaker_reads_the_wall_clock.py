# expect: wrong_result from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def allow(self):
        if self.state == "open" and time.monotonic() - self.opened_at >= self.cooldown_s:
            self.state = "half-open"
            return True
        return self.state == "closed"
