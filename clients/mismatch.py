"""Why a channel does not connect although a server listens there: found at once, said in one line.

gRPC reports a failed TLS handshake only as a channel that never becomes ready (the server
logs ``Handshake failed ... WRONG_VERSION_NUMBER``), so a client that disagrees with its
server on how to connect used to wait out its connect timeout on every retry (about 100 s
with the defaults) and then say "unreachable". Such a disagreement is not transient:
asking again changes neither side. So when a channel first fails (TRANSIENT_FAILURE)
before any server answered it, and something accepts connections at the address
(``clients.balancing.nothing_listens`` says otherwise), ``clients.channel`` asks
``diagnose``, which asks the server itself with a few bytes on sockets of its own
(milliseconds on a reachable server; each step gives up after ``timeout``):

1. It sends a TLS ClientHello (made in memory by Python's ``ssl``, verifying nothing) and
   reads the first bytes of the reply. A TLS server answers with a TLS record: a
   handshake (0x16) or an alert (0x15), then the major version 0x03. That is the
   protocol's framing, not an error text, so it holds whatever TLS library the server
   uses and whether or not it requires client certificates. A plaintext client is told
   that the server uses TLS.
2. A TLS client whose server did not answer in TLS sends the HTTP/2 connection preface in
   plaintext; a server that answers with an HTTP/2 SETTINGS frame (every gRPC server
   sends one first) is a plaintext gRPC server: the client is told it does not use TLS.
3. A TLS client whose server speaks TLS makes the handshake gRPC makes, with its own CA,
   client certificate and the host name it dialled, and reads OpenSSL's verdict
   (``SSLCertVerificationError.verify_code``): a host name or IP address mismatch is a
   certificate for another host (the names it does hold are read from a second handshake
   that skips the name check); any other verification failure is a CA that did not sign
   the server's certificate. A handshake that verifies but is then cut off (an alert, or
   the connection closed on the first bytes after it: TLS 1.3 clients finish before the
   server checks them, and gRPC's server closes without a word) is a server that requires
   a client certificate (none was given) or refuses the one given, where the server
   asks for one: a TLS 1.2 handshake shows its CertificateRequest in the clear (handshake
   message 13, before ServerHelloDone, 14), which step 3 reads off the records.

Anything else (a step that times out, a peer that is no gRPC server, a handshake that
verifies and is answered) is no mismatch: ``diagnose`` returns None and the channel waits
and retries as before. Tokens need no probe: the server answers UNAUTHENTICATED at once,
and ``clients.channel`` words that the same way. Each finding is a cause and a fix whose
settings (``{tls_ca}``, ...) are spelled where the line is written
(``clients.errors.ConnectionMismatch``).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

from clients.balancing import Target, connect_endpoint

TLS_RECORDS = (0x15, 0x16)  # alert, handshake
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 0x04, 0, 0, 0, 0, 0])  # + empty SETTINGS
HTTP2_SETTINGS = 0x04
HANDSHAKE_RECORD, CERTIFICATE_REQUEST, SERVER_HELLO_DONE = 22, 13, 14
HOST_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH

CA_FIX = "give the CA that signed the server's certificate with {tls_ca}"
CLIENT_CERT_FIX = "give a certificate signed by the server's --tls-client-ca with {tls_cert}"


@dataclass(frozen=True)
class TlsSettings:
    """What a TLS client connects with: the CA's PEM bytes and where they came from, and
    the paths of its own certificate and key (None: it gives none)."""

    ca: bytes
    ca_name: str
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class Finding:
    """Why the client and the server cannot connect, and what fixes it (a template)."""

    cause: str
    fix: str


def diagnose(target: Target, tls: TlsSettings | None, timeout: float = 1.0) -> Finding | None:
    """The mismatch between this client (plaintext where ``tls`` is None) and the server
    at the first of ``target``'s addresses that accepts a connection; None where there is
    none to be found (see the module docstring)."""
    for endpoint in target.endpoints:
        first = _reply(endpoint, target.scheme, _client_hello(), 5, timeout)
        if first is None:
            continue  # nothing accepts here (a lost replica): ask the next one
        speaks_tls = len(first) >= 2 and first[0] in TLS_RECORDS and first[1] == 0x03
        if tls is None:
            return Finding("uses TLS and this client connects in plaintext", CA_FIX) if speaks_tls else None
        if not speaks_tls:
            answer = _reply(endpoint, target.scheme, HTTP2_PREFACE, 9, timeout) or b""
            if len(answer) >= 4 and answer[3] == HTTP2_SETTINGS:
                return Finding("does not use TLS (it answers in plaintext) and this client connects over TLS",
                               "connect {no_tls}, or start the server with --tls-cert and --tls-key")
            return None
        host = None if target.scheme == "unix" else endpoint.rpartition(":")[0].strip("[]")
        return _verify(endpoint, target.scheme, tls, host, timeout)
    return None


def _client_hello(maximum: ssl.TLSVersion | None = None) -> bytes:
    """A TLS ClientHello offering HTTP/2 (up to TLS version ``maximum``), as the first bytes a
    TLS client sends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if maximum is not None:
        context.maximum_version = maximum
    context.set_alpn_protocols(["h2"])
    outgoing = ssl.MemoryBIO()
    handshake = context.wrap_bio(ssl.MemoryBIO(), outgoing)
    try:
        handshake.do_handshake()
    except ssl.SSLWantReadError:
        pass  # it waits for the server's answer: the hello is written
    return outgoing.read()


def _exchange(endpoint: str, scheme: str, payload: bytes, enough: Callable[[bytes], bool],
              timeout: float) -> bytes | None:
    """What the server answers ``payload`` with, read until ``enough`` of it came (or it closes,
    resets or stays silent for ``timeout``); None where no connection could be made."""
    try:
        sock = connect_endpoint(endpoint, scheme, timeout)
    except OSError:
        return None
    received = b""
    with sock:
        try:
            sock.sendall(payload)
            while not enough(received):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
        except OSError:
            pass  # reset or silent: what came so far is the answer
    return received


def _reply(endpoint: str, scheme: str, payload: bytes, size: int, timeout: float) -> bytes | None:
    """The first ``size`` bytes the server answers ``payload`` with (fewer where it closes
    or stays silent for ``timeout``); None where no connection could be made."""
    received = _exchange(endpoint, scheme, payload, lambda got: len(got) >= size, timeout)
    return received[:size] if received is not None else None


def _context(tls: TlsSettings, check_hostname: bool) -> ssl.SSLContext | Finding | None:
    """A client context as gRPC's: the CA, the client's certificate, HTTP/2. A Finding where
    the CA holds no certificate; None where the client's certificate or key cannot be loaded
    (gRPC cannot connect with them either; nothing to say about the server)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_verify_locations(cadata=tls.ca.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError):
        return Finding(f"cannot be checked: the CA given ({tls.ca_name}) holds no PEM certificate", CA_FIX)
    if tls.cert is not None and tls.key is not None:
        try:
            context.load_cert_chain(tls.cert, tls.key)
        except OSError:
            return None
    context.set_alpn_protocols(["h2"])
    return context


def _verify(endpoint: str, scheme: str, tls: TlsSettings, host: str | None, timeout: float) -> Finding | None:
    """Step 3 of the module docstring: the handshake gRPC makes, and what failed in it."""
    context = _context(tls, check_hostname=host is not None)
    if not isinstance(context, ssl.SSLContext):
        return context
    try:
        sock = connect_endpoint(endpoint, scheme, timeout)
    except OSError:
        return None
    with sock, context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False) as wrapped:
        try:
            wrapped.do_handshake()
        except ssl.SSLCertVerificationError as error:
            if error.verify_code in HOST_MISMATCH and host is not None:
                names = _certificate_names(endpoint, scheme, tls, timeout)
                listed = f"it names {names}, not {host}" if names else f"not {host}"
                return Finding(f"has a TLS certificate for another host ({listed})",
                               "give {address} as a name it lists, or give the server a certificate for "
                               + host.replace("{", "{{").replace("}", "}}") + " (serve --tls-cert)")
            return Finding(f"has a TLS certificate that the CA given ({tls.ca_name}) did not sign "
                           f"({error.verify_message})", CA_FIX)
        except OSError:  # an alert, or the connection cut: see whether the server asks for a certificate
            return _refused_client(endpoint, scheme, tls, timeout)
        try:
            wrapped.sendall(HTTP2_PREFACE)
            if wrapped.recv(9):
                return None  # it answers: no mismatch to name
        except OSError:
            pass  # cut after the handshake (TLS 1.3 sends a refused certificate's alert late): asked below
    return _refused_client(endpoint, scheme, tls, timeout)


def _refused_client(endpoint: str, scheme: str, tls: TlsSettings, timeout: float) -> Finding | None:
    """A server whose certificate verified, and which cut the connection off: a finding
    where it asks for a client certificate (none given, or it refused the one given)."""
    if not _asks_for_certificate(endpoint, scheme, timeout):
        return None
    if tls.cert is None:
        return Finding("requires a client certificate (serve --tls-client-ca) and this client gave none",
                       CLIENT_CERT_FIX)
    return Finding(f"refused this client's certificate ({tls.cert})", CLIENT_CERT_FIX)


def _asks_for_certificate(endpoint: str, scheme: str, timeout: float) -> bool:
    """Whether the server's TLS 1.2 handshake holds a CertificateRequest (False where it does
    not, or does not speak TLS 1.2)."""
    received = _exchange(endpoint, scheme, _client_hello(ssl.TLSVersion.TLSv1_2),
                         lambda got: bool({CERTIFICATE_REQUEST, SERVER_HELLO_DONE} & set(_handshake_messages(got))),
                         timeout)
    return received is not None and CERTIFICATE_REQUEST in _handshake_messages(received)


def _handshake_messages(data: bytes) -> list[int]:
    """The types of the handshake messages in ``data``'s whole TLS records, in order."""
    payload, at = b"", 0
    while at + 5 <= len(data):
        length = int.from_bytes(data[at + 3:at + 5], "big")
        if at + 5 + length > len(data):
            break
        if data[at] == HANDSHAKE_RECORD:
            payload += data[at + 5:at + 5 + length]
        at += 5 + length
    types, at = [], 0
    while at + 4 <= len(payload):
        types.append(payload[at])
        at += 4 + int.from_bytes(payload[at + 1:at + 4], "big")
    return types


def _certificate_names(endpoint: str, scheme: str, tls: TlsSettings, timeout: float) -> str:
    """The names the server's certificate holds (its subjectAltName, else its CN), read from a
    handshake that checks the CA but not the name; "" where that cannot be read."""
    context = _context(tls, check_hostname=False)
    if not isinstance(context, ssl.SSLContext):
        return ""
    try:
        with connect_endpoint(endpoint, scheme, timeout) as sock, context.wrap_socket(sock) as wrapped:
            certificate = wrapped.getpeercert() or {}
    except (OSError, ValueError):
        return ""
    kinds = {"IP Address": "IP"}
    names = [f"{kinds.get(kind, kind)}:{value}" for kind, value in certificate.get("subjectAltName", ())]
    if not names:
        names = [f"CN={value}" for field in certificate.get("subject", ()) for key, value in field
                 if key == "commonName"]
    return ", ".join(names)
