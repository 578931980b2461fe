"""A minimal NATS client (the text protocol over one socket), enough for what the benchmarks
ask of a NATS server: JetStream API requests, such as deleting the streams a fleet created
under its own prefix on a shared server (nothing else would ever remove them).
"""

import json
import socket


class Nats:
    def __init__(self, host="127.0.0.1", port=4222, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.file = self.sock.makefile("rb")
        self.file.readline()  # INFO {...}
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
        self.seq = 0

    def request(self, subject, payload=b""):
        """Publishes to `subject` with a reply inbox and returns the reply's payload."""
        self.seq += 1
        inbox = f"_INBOX.bench.{self.seq}".encode()
        self.sock.sendall(b"SUB " + inbox + b" " + str(self.seq).encode() + b"\r\n"
                          + b"PUB " + subject.encode() + b" " + inbox + b" "
                          + str(len(payload)).encode() + b"\r\n" + payload + b"\r\n")
        while True:
            line = self.file.readline()
            if not line:
                raise OSError("NATS closed the connection")
            if line.startswith(b"-ERR"):
                raise OSError(line.decode().strip())
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG"):
                body = self.file.read(int(line.split()[-1]) + 2)[:-2]
                if line.split()[1] == inbox:
                    return body

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def delete_streams(host, port, streams):
    """Deletes JetStream streams; one that does not exist counts as deleted. Returns the names
    that could not be deleted."""
    failed = []
    with Nats(host, port) as n:
        for stream in streams:
            reply = n.request(f"$JS.API.STREAM.DELETE.{stream}")
            try:
                doc = json.loads(reply)
            except ValueError:
                doc = {}
            if not (doc.get("success") or "stream not found" in reply.decode(errors="replace")):
                failed.append(stream)
    return failed
