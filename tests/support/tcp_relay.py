"""A TCP relay in front of a server, that can make the server look hung to its clients.

:meth:`TcpRelay.hang` stops forwarding in both directions without closing anything: requests in
flight stay unanswered and the clients' connections stay open (no FIN, no RST), as with a
server that froze or a network path that drops packets. New connections are refused from then
on, so a client that gives the connection up and tries the next address moves on at once; with
``refuse_new=False`` they are accepted and held like the others, as a frozen server's kernel
does. :meth:`TcpRelay.resume` forwards again on every connection kept open.
"""

from __future__ import annotations

import selectors
import socket
import threading


class TcpRelay:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._hung = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hang(self, refuse_new: bool = True) -> None:
        self._hung.set()
        if refuse_new:
            self._close_listener()

    def resume(self) -> None:
        self._hung.clear()

    def close(self) -> None:
        self._stopped.set()
        self._close_listener()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _close_listener(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        with selectors.DefaultSelector() as selector:
            for sock in (a, b):
                selector.register(sock, selectors.EVENT_READ)
            while not self._stopped.is_set():
                if self._hung.is_set():
                    self._stopped.wait(0.5)  # hold the connection open, forward nothing
                    continue
                for key, _ in selector.select(timeout=0.2):
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = sock.recv(65536)
                        if not data:
                            raise OSError("closed")
                        peer[sock].sendall(data)
                    except OSError:
                        a.close()
                        b.close()
                        return
