"""What the command line checks of a scheduler address before it imports Dask: whether
dask.distributed is installed, and whether a peer speaks TLS (``__main__._check_scheduler``).
Standard library only, so the checks come before torch and Dask are imported."""

import socket


def check_distributed():
    """Exit with the install command where dask.distributed is missing (``--scheduler``)."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise SystemExit(
            "--scheduler needs dask.distributed: from the package's clone, "
            "pip install -e '.[distributed]'"
        ) from None


def speaks_tls(host, port, timeout):
    """Whether the peer at ``host:port`` answers a TLS handshake within ``timeout``
    seconds: it completes, or the peer refuses it with a TLS alert (a client
    certificate required, ...). Silence, a close or bytes that are no TLS: False."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=host or None):
            return True
    except ssl.SSLError as exc:  # the peer's alert is TLS; a record that is none is not
        return "ALERT" in (exc.reason or "").upper()
    except OSError:  # timed out, reset, closed
        return False
