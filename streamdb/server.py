"""`streamdb serve`: the engine plus the wire server, with clean shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys

from streamdb.config import Settings, check_network_security
from streamdb.runtime.engine import Engine

log = logging.getLogger("streamdb")

SHUTDOWN_GRACE_SECONDS = 20
# How long a thread holding the GIL keeps it once another wants it (Python's default: 5 ms). Long
# statements are parsed and planned on worker threads; the event loop takes the GIL back several
# times per client message (each socket call releases it), so at 5 ms a point read waited 8 ms
# (p50) behind a worker, and 0.5 ms keeps it near its idle latency.
GIL_SWITCH_INTERVAL_SECONDS = 0.0005


async def run_server(settings: Settings, install_signals: tuple[signal.Signals, ...] = ()) -> int:
    from streamdb.wire.server import WireServer
    from streamdb.wire.tls import server_ssl_context

    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    check_network_security(settings)  # before opening anything: refuses e.g. 'trust' on 0.0.0.0
    ssl_context = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        ssl_context = server_ssl_context(settings.tls_cert_file, settings.tls_key_file)
    engine = Engine(settings)
    wire = WireServer(engine, settings.host, settings.port, max_connections=settings.max_connections,
                      max_message_bytes=settings.max_message_bytes,
                      auth_method=settings.auth_method, ssl_context=ssl_context,
                      tls_required=settings.tls_required, observer=engine.metrics,
                      authentication_timeout=settings.authentication_timeout_s)
    await wire.start()
    console = None
    if settings.console or settings.metrics:  # the web console and /metrics share one HTTP listener
        from streamdb.console.server import ConsoleServer

        console = ConsoleServer(engine, settings.host, settings.console_port, console=settings.console,
                                metrics=settings.metrics, ssl_context=ssl_context)
        try:
            await console.start()
        except BaseException:  # e.g. the port is busy: release what is open, then report
            await wire.close()
            await asyncio.to_thread(engine.close)
            raise
    engine.start()
    # What startup made lives as long as the server: out of the collector's full passes, which
    # otherwise walk it all (a pause of ~0.1-0.2 s holding the GIL) whenever a large statement's
    # planning allocates enough to trigger one. The Spark session freezes its own once ready.
    gc.freeze()
    log.info("StreamDB listening on %s:%d (data in %s, Spark master %s; console %s)", settings.host, wire.port,
             settings.data_dir, settings.spark_master,
             f"on port {console.port}" if console is not None and settings.console
             else f"off, metrics on port {console.port}" if console is not None else "off")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in install_signals:
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    if console is not None:
        await console.close()  # ends push queries of the console before the views stop
    await asyncio.to_thread(engine.sources.stop)
    await asyncio.to_thread(engine.sinks.stop)
    await engine.views.stop()
    try:
        await asyncio.wait_for(wire.close(), timeout=SHUTDOWN_GRACE_SECONDS)
    except TimeoutError:
        log.warning("connections did not close in time")
    await asyncio.to_thread(engine.close)
    log.info("stopped")
    return 0
