# triton.backends.compiler: a compile target, and the backend that compiles for it.

class GPUTarget:
    backend: str
    arch: int | str
    warp_size: int
    def __init__(self, backend: str, arch: int | str, warp_size: int) -> None: ...

class BaseBackend: ...
