"""Container health check: the server's event loop answers on its port (no login, so no password needed).

It sends the 8-byte SSLRequest every PostgreSQL client may open with and expects the one-byte answer
('S' or 'N'), then closes: this shows the server is accepting and serving connections, not only that
the kernel holds the port open. The port is STREAMDB_PORT (the setting), else 6875.
"""

from __future__ import annotations

import os
import socket
import struct
import sys

SSL_REQUEST = struct.pack("!ii", 8, 80877103)


def main() -> int:
    port = int(os.environ.get("STREAMDB_PORT", "6875"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(SSL_REQUEST)
            answer = s.recv(1)
    except OSError as e:
        print(f"unhealthy: {e}", file=sys.stderr)
        return 1
    if answer not in (b"S", b"N"):
        print(f"unhealthy: unexpected answer {answer!r} to SSLRequest", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
