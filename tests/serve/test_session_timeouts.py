"""Timeouts of the serving side: the handshake has one deadline however slowly a client trickles,
and a connected client may sit idle between tests longer than the per-reply timeout."""
import socket
import threading
import time

from gdrlab import engine

nat = engine.native()


def _serve_in_thread(server):
    result = {}
    t = threading.Thread(target=lambda: result.update(r=server.serve_one(5000)), daemon=True)
    t.start()
    return t, result


def test_trickling_client_cannot_hold_the_handshake():
    server = nat.Server("127.0.0.1", 0, "tok", 1000)
    t, result = _serve_in_thread(server)
    s = socket.create_connection(("127.0.0.1", server.port))
    hello = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 1, 0, 200) + b"x" * 200
    t0 = time.monotonic()
    closed_at = None
    try:
        for b in hello:  # one byte every 0.3 s: each gap is inside the 1 s per-call timeout
            s.sendall(bytes([b]))
            time.sleep(0.3)
            if not t.is_alive():
                closed_at = time.monotonic() - t0
                break
    except OSError:
        closed_at = time.monotonic() - t0
    t.join(5)
    s.close()
    assert closed_at is not None and closed_at < 3.0, "server kept waiting past the handshake deadline"
    came, error = result["r"]
    assert came and "PeerTimeout" in error


def test_idle_client_between_tests_is_kept():
    server = nat.Server("127.0.0.1", 0, "tok", 1000)
    t, result = _serve_in_thread(server)
    with engine.Connection("127.0.0.1", server.port, "tok", timeout_s=1.0) as conn:
        assert conn.transfer(engine.Buffer(4096), "host")
        time.sleep(2.0)  # twice the per-reply timeout, idle between tests
        assert conn.transfer(engine.Buffer(4096), "host")
    t.join(5)
    assert result["r"] == (True, "")


def test_error_during_handshake_keeps_the_reason():
    # A server that answers HELLO with an ERROR frame: the client reports the server's text.
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)

    def fake():
        c, _ = ls.accept()
        c.recv(4096)
        body = bytes([0]) + (17).to_bytes(4, "little") + b"no GPU over there"
        c.sendall(nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 6, 0, len(body)) + body)
        time.sleep(0.5)
        c.close()

    th = threading.Thread(target=fake, daemon=True)
    th.start()
    import pytest
    from gdrlab import errors
    with pytest.raises(errors.Unavailable, match="no GPU over there"):
        engine.Connection("127.0.0.1", ls.getsockname()[1], "", timeout_s=2.0)
    th.join(5)
    ls.close()


def test_a_server_that_trickles_its_welcome_cannot_hold_the_client():
    """One byte of WELCOME every 0.3 s, each inside the client's 1 s per-call timeout: the client's
    handshake deadline ends it after about 1 s instead of waiting for the whole frame (probe E9)."""
    import pytest
    from gdrlab import errors

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    done = threading.Event()
    body = (200).to_bytes(4, "little") + b"d" * 200
    welcome = nat.encode_header(nat.FRAME_MAGIC, nat.WIRE_VERSION, 2, 0, len(body)) + body

    def trickle():
        c, _ = ls.accept()
        c.recv(4096)
        try:
            for b in welcome:
                if done.wait(0.3):
                    break
                c.sendall(bytes([b]))
        except OSError:
            pass
        c.close()

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    t0 = time.monotonic()
    with pytest.raises(errors.PeerTimeout):
        engine.Connection("127.0.0.1", ls.getsockname()[1], "", timeout_s=1.0)
    took = time.monotonic() - t0
    done.set()
    th.join(5)
    ls.close()
    assert took < 3.0, f"the client waited {took:.1f} s for a trickled WELCOME"  # the whole frame takes 65 s
