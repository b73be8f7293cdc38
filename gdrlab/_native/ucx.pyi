"""ucx wire (private: use gdrlab.transfer.ucx_wire)"""



def set_library(path: str) -> None:
    """libucp.so.0 to open on first use (before it; '' : the default search)"""

def status() -> dict: ...

def require_transports(tls: str) -> None: ...

class Client:
    def __init__(self, host: str, port: int, token: str, timeout_ms: int) -> None: ...

    @property
    def server_description(self) -> str: ...

    def run(self, src_mem: str, dst_mem: str, mode: int, size: int, iters: int, warmup: int, window: int, device: int, seed: int, tls: str = '') -> tuple: ...

    def close(self) -> None: ...
