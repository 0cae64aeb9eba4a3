# expect: work_grows from check_constant_time_allocate(Wrong)
class Wrong(FreeListPool):
    @property
    def num_free(self):
        return self.ref.count(0)  # a scan of every block, hidden in C
